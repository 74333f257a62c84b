//! The seccomp filter of a command: the part of `network = "deny"` and of `allowed_commands` that
//! landlock cannot say. One program, written for the rules the profile asks ([`Rules`]).
//!
//! Refused with `EACCES` (the command sees "Permission denied", like landlock's refusals), under
//! `network = "deny"`:
//! - `socket` and `socketpair` for every family but `AF_UNIX`, and for `AF_UNIX` every type but
//!   `SOCK_STREAM` and `SOCK_SEQPACKET`: no UDP, raw, netlink or packet sockets, and no Unix
//!   datagram sockets (a datagram socket, even one of a connected `socketpair`, can `sendto` any
//!   path or abstract socket);
//! - `connect`, whatever the address: seccomp cannot read the address behind the pointer, so Unix
//!   connects are refused everywhere, inside the writable roots too (`socketpair` still works);
//! - `io_uring_setup`, `io_uring_enter`, `io_uring_register`: io_uring opens and connects sockets
//!   without these system calls;
//!
//! under `allowed_commands`:
//! - `memfd_create` without `MFD_NOEXEC_SEAL`: a memfd lives on the kernel's internal shmem mount,
//!   which landlock does not cover, so one made executable could be run by `execveat(fd)` or
//!   `execve("/proc/self/fd/N")` whatever the execute rights say. Sealed, it has no execute bit and
//!   cannot get one. (A file made with `O_TMPFILE` lives in a directory of a root, where landlock
//!   grants no execute right; the memfd sysctl would change the whole machine.)
//!
//! and, on x86_64, the same calls through the x32 ABI (number | `__X32_SYSCALL_BIT`).
//!
//! The filter is written for the build's architecture, x86_64 or aarch64 (the two agentd's raw
//! system calls, `crate::syscall`, are written for); a system call of another one (i386
//! through `int 0x80` on x86_64) kills the process: fail closed.
//!
//! The program is written out here, 20 instructions on x86_64, rather than compiled by seccompiler
//! (which is the reference it is tested against, verdict for verdict: see the tests). The kernel
//! prepares a filter anew for every command: it compiles it, and runs it once for every system call
//! number to cache the calls it always allows. seccompiler's program for the same rules has 233
//! instructions, a chain per call with the x32 numbers repeated, and installing it took 155–175 µs
//! per command on this project's machine; this one takes about 50 µs. Its layout: the architecture,
//! the call number with the x32 bit masked off (so x32 calls meet the same rules), a few range
//! checks that let every other call through within eight instructions, then the socket arguments
//! and `memfd_create`'s flags.

use std::sync::Arc;

use seccompiler::{BpfProgram, sock_filter};

/// `AUDIT_ARCH_*` of the build's architecture (the ELF machine, 64-bit, little-endian); `None`:
/// no filter is written for it.
fn audit_arch() -> Option<u32> {
    const LE_64: u32 = 0x8000_0000 | 0x4000_0000;
    if cfg!(target_arch = "x86_64") {
        Some(LE_64 | 62)
    } else if cfg!(target_arch = "aarch64") {
        Some(LE_64 | 183)
    } else {
        None
    }
}

/// Offsets in `struct seccomp_data`; an argument's low 32 bits (the architectures above are
/// little-endian), which is all of an `int` argument the kernel reads.
const NR: u32 = 0;
const ARCH: u32 = 4;
const fn arg_low(n: u32) -> u32 {
    16 + 8 * n
}

const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Where a jump goes: the next instruction, or one of the program's exits and blocks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum To {
    Next,
    Socket,
    Memfd,
    Refuse,
    Allow,
    Kill,
}

enum Op {
    Load(u32),
    And(u32),
    Jump { op: u32, k: u32, yes: To, no: To },
    Label(To),
    Return(u32),
}

/// Lays out `ops`, resolving every jump to its label (forward only, as BPF jumps are).
fn assemble(ops: &[Op]) -> Result<BpfProgram, String> {
    let mut at = Vec::new();
    let mut index = 0usize;
    for op in ops {
        match op {
            Op::Label(label) => at.push((*label, index)),
            _ => index += 1,
        }
    }
    let target = |label: To, from: usize| -> Result<u8, String> {
        if label == To::Next {
            return Ok(0);
        }
        let (_, to) = at.iter().find(|(l, _)| *l == label).ok_or(format!("no label {label:?}"))?;
        to.checked_sub(from + 1)
            .and_then(|offset| u8::try_from(offset).ok())
            .ok_or(format!("jump to {label:?} out of reach"))
    };
    let mut program = Vec::with_capacity(index);
    for op in ops {
        let (code, jt, jf, k) = match *op {
            Op::Label(_) => continue,
            Op::Load(offset) => (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, offset),
            Op::And(mask) => (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K, 0, 0, mask),
            Op::Jump { op, k, yes, no } => {
                let from = program.len();
                (libc::BPF_JMP | op | libc::BPF_K, target(yes, from)?, target(no, from)?, k)
            }
            Op::Return(action) => (libc::BPF_RET | libc::BPF_K, 0, 0, action),
        };
        program.push(sock_filter { code: u16::try_from(code).map_err(|e| e.to_string())?, jt, jf, k });
    }
    Ok(program)
}

/// A system call number or constant as the program compares it (a 32-bit word).
fn word(value: impl TryInto<u32, Error = std::num::TryFromIntError>) -> Result<u32, String> {
    value.try_into().map_err(|e| e.to_string())
}

/// What a filter refuses: the rules of `network = "deny"`, of `allowed_commands`, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// Sockets but Unix stream and seqpacket, `connect`, io_uring.
    pub network: bool,
    /// `memfd_create` without `MFD_NOEXEC_SEAL`.
    pub memfd: bool,
}

/// Builds the filter for `rules` (in the parent, once per set of rules: the child only installs it).
pub fn filter(rules: Rules) -> Result<BpfProgram, String> {
    let arch = audit_arch()
        .ok_or_else(|| format!("no seccomp filter for the {} architecture", std::env::consts::ARCH))?;
    let (socket, socketpair, connect) =
        (word(libc::SYS_socket)?, word(libc::SYS_socketpair)?, word(libc::SYS_connect)?);
    // The three io_uring calls are numbered in a row on every architecture (the unified table).
    let (uring_first, uring_last) = (word(libc::SYS_io_uring_setup)?, word(libc::SYS_io_uring_register)?);
    if word(libc::SYS_io_uring_enter)? != uring_first + 1 || uring_last != uring_first + 2 {
        return Err("the io_uring calls are not numbered in a row here".to_owned());
    }
    let (low, high) = (socket.min(socketpair).min(connect), socket.max(socketpair).max(connect));
    if high >= uring_first {
        return Err("the socket calls are not numbered below the io_uring calls here".to_owned());
    }
    let jump = |op: u32, k: u32, yes: To, no: To| Op::Jump { op, k, yes, no };
    let (jeq, jgt, jge, jset) = (libc::BPF_JEQ, libc::BPF_JGT, libc::BPF_JGE, libc::BPF_JSET);
    let mut ops = vec![Op::Load(ARCH), jump(jeq, arch, To::Next, To::Kill), Op::Load(NR)];
    if cfg!(target_arch = "x86_64") {
        // x32 calls carry the x86_64 numbers with this bit set: the same rules apply to them.
        ops.push(Op::And(!X32_SYSCALL_BIT));
    }
    if rules.memfd {
        let other = if rules.network { To::Next } else { To::Allow };
        ops.push(jump(jeq, word(libc::SYS_memfd_create)?, To::Memfd, other));
    }
    if rules.network {
        let unix = word(libc::AF_UNIX)?;
        let (stream, seqpacket) = (word(libc::SOCK_STREAM)?, word(libc::SOCK_SEQPACKET)?);
        ops.extend([
            // Every call above the io_uring ones, and between the socket calls and them: allowed.
            jump(jgt, uring_last, To::Allow, To::Next),
            jump(jge, uring_first, To::Refuse, To::Next),
            jump(jgt, high, To::Allow, To::Next),
            jump(jge, low, To::Next, To::Allow),
            jump(jeq, connect, To::Refuse, To::Next),
            jump(jeq, socket, To::Socket, To::Next),
            jump(jeq, socketpair, To::Socket, To::Allow),
            // socket(domain, type, protocol) and socketpair(domain, type, protocol, sv): Unix stream
            // and seqpacket sockets only. The low four bits of `type` are the socket type (the rest
            // are SOCK_NONBLOCK and SOCK_CLOEXEC).
            Op::Label(To::Socket),
            Op::Load(arg_low(0)),
            jump(jeq, unix, To::Next, To::Refuse),
            Op::Load(arg_low(1)),
            Op::And(0xf),
            jump(jeq, stream, To::Allow, To::Next),
            jump(jeq, seqpacket, To::Allow, To::Refuse),
        ]);
    }
    if rules.memfd {
        // memfd_create(name, flags): sealed against execution, or refused.
        ops.extend([
            Op::Label(To::Memfd),
            Op::Load(arg_low(1)),
            jump(jset, libc::MFD_NOEXEC_SEAL, To::Allow, To::Refuse),
        ]);
    }
    ops.extend([
        Op::Label(To::Refuse),
        Op::Return(libc::SECCOMP_RET_ERRNO | word(libc::EACCES)?),
        Op::Label(To::Allow),
        Op::Return(libc::SECCOMP_RET_ALLOW),
        Op::Label(To::Kill),
        Op::Return(libc::SECCOMP_RET_KILL_PROCESS),
    ]);
    assemble(&ops)
}

/// The program for each set of rules, built once.
pub struct Filters {
    network: Arc<BpfProgram>,
    memfd: Arc<BpfProgram>,
    both: Arc<BpfProgram>,
}

impl Filters {
    pub fn build() -> Result<Self, String> {
        let built = |network, memfd| filter(Rules { network, memfd }).map(Arc::new);
        Ok(Self { network: built(true, false)?, memfd: built(false, true)?, both: built(true, true)? })
    }

    /// The program for `rules`; `None` when they refuse nothing.
    pub fn get(&self, rules: Rules) -> Option<Arc<BpfProgram>> {
        match (rules.network, rules.memfd) {
            (true, false) => Some(Arc::clone(&self.network)),
            (false, true) => Some(Arc::clone(&self.memfd)),
            (true, true) => Some(Arc::clone(&self.both)),
            (false, false) => None,
        }
    }
}

/// Whether this kernel has seccomp filters at all (`Seccomp:` in `/proc/self/status`).
pub fn kernel_has_seccomp() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| s.lines().any(|l| l.starts_with("Seccomp:")))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
        TargetArch,
    };

    use super::*;

    const NETWORK: Rules = Rules { network: true, memfd: false };
    const MEMFD: Rules = Rules { network: false, memfd: true };
    const BOTH: Rules = Rules { network: true, memfd: true };

    /// The same rules, compiled by seccompiler: the reference the written program must match.
    fn reference_filter(rules: Rules) -> BpfProgram {
        let arch = if cfg!(target_arch = "x86_64") { TargetArch::x86_64 } else { TargetArch::aarch64 };
        let condition = |arg: u8, op: SeccompCmpOp, value: u64| {
            SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).unwrap()
        };
        // The rules match what is refused: any family but AF_UNIX, and for AF_UNIX any type but
        // SOCK_STREAM (1) and SOCK_SEQPACKET (5), in five masks.
        let mut refused_sockets = vec![SeccompRule::new(vec![condition(0, SeccompCmpOp::Ne, 1)]).unwrap()];
        for (mask, value) in [(0xf, 0), (0xe, 2), (0xf, 4), (0xe, 6), (0x8, 8)] {
            refused_sockets.push(
                SeccompRule::new(vec![
                    condition(0, SeccompCmpOp::Eq, 1),
                    condition(1, SeccompCmpOp::MaskedEq(mask), value),
                ])
                .unwrap(),
            );
        }
        // memfd_create without MFD_NOEXEC_SEAL.
        let unsealed = vec![
            SeccompRule::new(vec![condition(1, SeccompCmpOp::MaskedEq(u64::from(libc::MFD_NOEXEC_SEAL)), 0)])
                .unwrap(),
        ];
        let mut refused = Vec::new();
        if rules.network {
            refused.extend([
                (libc::SYS_socket, refused_sockets.clone()),
                (libc::SYS_socketpair, refused_sockets),
                (libc::SYS_connect, Vec::new()),
                (libc::SYS_io_uring_setup, Vec::new()),
                (libc::SYS_io_uring_enter, Vec::new()),
                (libc::SYS_io_uring_register, Vec::new()),
            ]);
        }
        if rules.memfd {
            refused.push((libc::SYS_memfd_create, unsealed));
        }
        let mut chains: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        for (nr, chain) in refused {
            if cfg!(target_arch = "x86_64") {
                chains.insert(nr | i64::from(X32_SYSCALL_BIT), chain.clone());
            }
            chains.insert(nr, chain);
        }
        let filter =
            SeccompFilter::new(chains, SeccompAction::Allow, SeccompAction::Errno(libc::EACCES as u32), arch)
                .unwrap();
        BpfProgram::try_from(filter).unwrap()
    }

    /// `struct seccomp_data`, as the kernel hands it to a filter.
    fn data(nr: u32, arch: u32, args: [u64; 6]) -> [u8; 64] {
        let mut bytes = [0u8; 64];
        bytes[0..4].copy_from_slice(&nr.to_le_bytes());
        bytes[4..8].copy_from_slice(&arch.to_le_bytes());
        for (n, arg) in args.iter().enumerate() {
            bytes[16 + 8 * n..24 + 8 * n].copy_from_slice(&arg.to_le_bytes());
        }
        bytes
    }

    /// Runs a classic BPF program the way the kernel's seccomp does, for the instructions either
    /// program uses; `None` for anything else (an instruction the test does not know, a jump out of
    /// the program).
    fn run(program: &[sock_filter], data: &[u8; 64]) -> Option<u32> {
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let op = program.get(pc)?;
            let (code, k) = (u32::from(op.code), op.k);
            pc += 1;
            match code {
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                    let at = usize::try_from(k).ok()?;
                    a = u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?);
                }
                c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => a &= k,
                c if c == libc::BPF_RET | libc::BPF_K => return Some(k),
                c if c == libc::BPF_JMP | libc::BPF_JA => pc += usize::try_from(k).ok()?,
                c if c & 0x07 == libc::BPF_JMP && c & 0x08 == libc::BPF_K => {
                    let taken = match c & 0xf0 {
                        x if x == libc::BPF_JEQ => a == k,
                        x if x == libc::BPF_JGT => a > k,
                        x if x == libc::BPF_JGE => a >= k,
                        x if x == libc::BPF_JSET => a & k != 0,
                        _ => return None,
                    };
                    pc += usize::from(if taken { op.jt } else { op.jf });
                }
                _ => return None,
            }
        }
    }

    /// Verdict for verdict, the written program and seccompiler's agree, for each set of rules:
    /// every call number (and its x32 form), the wrong architecture, for the socket calls every
    /// family and type with the flags and high bits a caller may add, and for `memfd_create` every
    /// flag.
    #[test]
    fn the_written_filter_gives_the_references_verdict_on_every_call() {
        for rules in [NETWORK, MEMFD, BOTH] {
            same_verdicts(rules);
        }
    }

    fn same_verdicts(rules: Rules) {
        let (written, reference) = (filter(rules).unwrap(), reference_filter(rules));
        let arch = audit_arch().unwrap();
        let mut cases = Vec::new();
        for nr in (0..1100u32).chain([0x3fff_ffff, 0x7fff_ffff, 0xffff_ffff]) {
            for nr in [nr, nr | X32_SYSCALL_BIT] {
                cases.push(data(nr, arch, [0; 6]));
                cases.push(data(nr, arch ^ 1, [0; 6]));
                cases.push(data(nr, 0x4000_0003, [1, 1, 0, 0, 0, 0]));
            }
        }
        let sockets = [libc::SYS_socket, libc::SYS_socketpair].map(|n| u32::try_from(n).unwrap());
        for nr in sockets.into_iter().flat_map(|nr| [nr, nr | X32_SYSCALL_BIT]) {
            for family in (0..64u64).chain([1 << 32 | 1, 1 << 32 | 2, u64::MAX]) {
                for kind in 0..16u64 {
                    for flags in [0, 0x800, 0x8_0000, 0x8_0800, 0x10, 1 << 40] {
                        cases.push(data(nr, arch, [family, kind | flags, 0, 0, 0, 0]));
                    }
                }
            }
        }
        let memfd = u32::try_from(libc::SYS_memfd_create).unwrap();
        for nr in [memfd, memfd | X32_SYSCALL_BIT] {
            for flags in (0..64u64).chain([1 << 32, 1 << 32 | 8, u64::MAX, !8]) {
                cases.push(data(nr, arch, [0, flags, 0, 0, 0, 0]));
            }
        }
        for case in &cases {
            let verdicts = (run(&written, case), run(&reference, case));
            assert!(verdicts.0.is_some(), "the written program did not finish: {case:?}");
            assert_eq!(verdicts.0, verdicts.1, "{rules:?}: {case:?}");
        }
        // The cases reach every outcome.
        let outcomes: std::collections::HashSet<_> = cases.iter().filter_map(|c| run(&written, c)).collect();
        let refused = libc::SECCOMP_RET_ERRNO | libc::EACCES as u32;
        for outcome in [libc::SECCOMP_RET_ALLOW, refused, libc::SECCOMP_RET_KILL_PROCESS] {
            assert!(outcomes.contains(&outcome), "{rules:?}: {outcome:#x} never given");
        }
    }

    #[test]
    fn the_filter_is_short() {
        // Its cost per command grows with its length (see the module's doc).
        for (rules, most) in [(NETWORK, 24), (MEMFD, 12), (BOTH, 27)] {
            let program = filter(rules).unwrap();
            assert!(program.len() <= most, "{rules:?}: {}", program.len());
        }
        assert!(reference_filter(NETWORK).len() > 100);
    }
}
