//! The seccomp filter behind `network = "deny"`: the part of "no network" landlock cannot say.
//!
//! Refused with `EACCES` (the command sees "Permission denied", like landlock's refusals):
//! - `socket` and `socketpair` for every family but `AF_UNIX`, and for `AF_UNIX` every type but
//!   `SOCK_STREAM` and `SOCK_SEQPACKET`: no UDP, raw, netlink or packet sockets, and no Unix
//!   datagram sockets (a datagram socket, even one of a connected `socketpair`, can `sendto` any
//!   path or abstract socket);
//! - `connect`, whatever the address: seccomp cannot read the address behind the pointer, so Unix
//!   connects are refused everywhere, inside the writable roots too (`socketpair` still works);
//! - `io_uring_setup`, `io_uring_enter`, `io_uring_register`: io_uring opens and connects sockets
//!   without these system calls;
//! - on x86_64, the same calls through the x32 ABI (number | `__X32_SYSCALL_BIT`).
//!
//! The filter is written for the build's architecture; a system call of another one (i386 through
//! `int 0x80` on x86_64) kills the process: fail closed. On an architecture seccompiler does not
//! know, there is no filter and `network = "deny"` is reported partial.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};

/// The architecture the filter is written for: the build's.
fn target_arch() -> Option<TargetArch> {
    if cfg!(target_arch = "x86_64") {
        Some(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Some(TargetArch::aarch64)
    } else if cfg!(target_arch = "riscv64") {
        Some(TargetArch::riscv64)
    } else {
        None
    }
}

/// Builds the filter (in the parent, once: the child only installs it).
pub fn network_filter() -> Result<BpfProgram, String> {
    let arch = target_arch()
        .ok_or_else(|| format!("no seccomp filter for the {} architecture", std::env::consts::ARCH))?;
    let error = |e: seccompiler::BackendError| e.to_string();
    let condition = |arg: u8, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(error)
    };
    // socket(domain, type, protocol) and socketpair(domain, type, protocol, sv): the rules match
    // what is refused.
    let mut refused_sockets =
        vec![SeccompRule::new(vec![condition(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?]).map_err(error)?];
    for (mask, value) in REFUSED_UNIX_TYPES {
        refused_sockets.push(
            SeccompRule::new(vec![
                condition(0, SeccompCmpOp::Eq, libc::AF_UNIX as u64)?,
                condition(1, SeccompCmpOp::MaskedEq(mask), value)?,
            ])
            .map_err(error)?,
        );
    }
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (nr, chain) in [
        (libc::SYS_socket, refused_sockets.clone()),
        (libc::SYS_socketpair, refused_sockets),
        // An empty chain matches the call whatever its arguments.
        (libc::SYS_connect, Vec::new()),
        (libc::SYS_io_uring_setup, Vec::new()),
        (libc::SYS_io_uring_enter, Vec::new()),
        (libc::SYS_io_uring_register, Vec::new()),
    ] {
        if cfg!(target_arch = "x86_64") {
            // The x32 ABI shares the x86_64 audit arch and numbers these calls with bit 30 set.
            rules.insert(nr | X32_SYSCALL_BIT, chain.clone());
        }
        rules.insert(nr, chain);
    }
    let filter =
        SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EACCES as u32), arch)
            .map_err(error)?;
    BpfProgram::try_from(filter).map_err(error)
}

const X32_SYSCALL_BIT: i64 = 0x4000_0000;

/// `(mask, value)`: `type & mask == value` for every Unix socket type refused. The low four bits of
/// `type` are the socket type (the rest are SOCK_NONBLOCK, SOCK_CLOEXEC); these are all but
/// SOCK_STREAM (1) and SOCK_SEQPACKET (5), in five masks rather than fourteen values: the kernel
/// compiles the program again for every command, and that cost grows with its length (233
/// instructions instead of 521).
const REFUSED_UNIX_TYPES: [(u64, u64); 5] = [(0xf, 0), (0xe, 2), (0xf, 4), (0xe, 6), (0x8, 8)];

/// Whether this kernel has seccomp filters at all (`Seccomp:` in `/proc/self/status`).
pub fn kernel_has_seccomp() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| s.lines().any(|l| l.starts_with("Seccomp:")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_masks_name_every_type_but_stream_and_seqpacket() {
        for kind in 0..16u64 {
            let refused = REFUSED_UNIX_TYPES.iter().any(|(mask, value)| kind & mask == *value);
            assert_eq!(refused, kind != 1 && kind != 5, "type {kind}");
        }
    }

    #[test]
    fn the_filter_builds_for_this_architecture() {
        let program = network_filter().unwrap();
        // Arch check, then one chain per call (twice on x86_64): well within BPF's 4096.
        assert!(program.len() > 20 && program.len() < 4096, "{}", program.len());
    }
}
