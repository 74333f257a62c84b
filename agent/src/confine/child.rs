//! What the child applies to itself between `clone` and `exec` ([`ChildSteps`]), on raw system calls
//! only, and what it measured of it ([`ChildStatus`]), read back by the parent.

use std::io;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::sync::Arc;

use agentd_protocol::profile::Enforcement;
use nix::unistd::Pid;
use seccompiler::BpfProgram;

use super::ConfineError;
use super::identity::Identity;
use super::measured::{Applied, Expect, Measured, STATUS_LEN};
use super::report::{reasons, record};

/// What the child applies to itself between `clone` and `exec`; prepared by the parent.
///
/// The child shares the parent's memory until it execs (`clone(CLONE_VM)`, see
/// [`crate::exec::spawn::Spawner::spawn`]), so [`ChildSteps::enter`] takes `&self`: whatever the child
/// changed here, the parent would see as its own. The parent keeps it unchanged until the child
/// exec'd or exited.
pub struct ChildSteps {
    /// Under a profile; `false`: the cgroup join only (an unconfined command's plan).
    pub(super) confined: bool,
    /// The landlock ruleset's descriptor (`Some(None)`: asked, but landlock is not there).
    pub(super) ruleset: Option<Option<OwnedFd>>,
    pub(super) filter: Option<Arc<BpfProgram>>,
    /// Refuse to exec on anything less than asked.
    pub(super) strict: bool,
    /// `(RLIMIT_*, soft, hard)`.
    pub(super) rlimits: Vec<(libc::__rlimit_resource_t, u64, u64)>,
    /// Who the command becomes (`None`: `user = "agentd"`, it stays agentd's user).
    pub(super) identity: Option<Identity>,
    /// A duplicate of the command's cgroup join file ([`PidsCgroup::join`](super::cgroup::PidsCgroup::join)).
    /// Shared with the budget's own cgroup for commands that join it ([`super::Confiner`]'s plan
    /// when crowded): no descriptor of its own then.
    pub(super) cgroup_join: Option<Arc<OwnedFd>>,
}

/// What the child measured, written by the child into the parent's memory (they share it until the
/// exec) and read by the parent once the child exec'd or exited. All zeros: nothing was written.
#[derive(Debug, Default)]
pub struct ChildStatus {
    pub(super) bytes: [u8; STATUS_LEN],
}

impl ChildSteps {
    pub(super) fn expect(&self) -> Expect {
        Expect {
            landlock: self.ruleset.is_some(),
            seccomp: self.filter.is_some(),
            privileges: self.identity.is_some(),
        }
    }

    /// Runs in the child: raw system calls only ([`crate::syscall`]: the child runs beside
    /// agentd's thread, on its `errno`), nothing allocated, nothing of `self` changed. What landlock
    /// and seccomp gave goes to `status`; a strict profile that got less fails with `EPERM`.
    ///
    /// A `landlock_restrict_self` that succeeds enforces all of the ruleset ([`Applied`]).
    pub fn enter(&self, status: &mut ChildStatus) -> Result<(), i32> {
        use crate::syscall;
        if let Some(join) = &self.cgroup_join {
            join_cgroup(join)?;
        }
        if !self.confined {
            return Ok(());
        }
        for &(resource, soft, hard) in &self.rlimits {
            syscall::set_rlimit(resource, soft, hard)?;
        }
        // After the steps that need root (the cgroup, raised limits), before landlock: a failure
        // here is measured, not returned, so a best-effort profile still reports what it got.
        let privileges = self.identity.is_some_and(|identity| identity.apply().is_ok() && identity.holds());
        syscall::prctl(libc::PR_SET_NO_NEW_PRIVS, 1)?;
        let expect = self.expect();
        let landlock = match &self.ruleset {
            None => Applied::NotAsked,
            Some(None) => Applied::NotEnforced,
            Some(Some(ruleset)) => match syscall::landlock_restrict_self(ruleset.as_raw_fd()) {
                Ok(()) => Applied::Full,
                Err(_) => Applied::Failed,
            },
        };
        let seccomp = self.filter.as_deref().is_some_and(|program| syscall::seccomp_filter(program).is_ok());
        let no_new_privs = syscall::prctl(libc::PR_GET_NO_NEW_PRIVS, 0) == Ok(1);
        let measured = Measured { landlock, no_new_privs, seccomp, privileges };
        status.bytes = measured.encode();
        if self.strict && measured.short_of(expect) {
            return Err(libc::EPERM);
        }
        Ok(())
    }

    /// In the parent, after the child exec'd or exited (`spawned`, with what it wrote to `status`):
    /// `report` gets what the child measured. A strict child that refused to exec becomes
    /// [`ConfineError::NotEnforceable`] (inside the `io::Error`).
    pub fn conclude(
        &self,
        status: &ChildStatus,
        spawned: io::Result<Pid>,
        report: &mut Enforcement,
    ) -> io::Result<Pid> {
        let (expect, measured) = (self.expect(), Measured::decode(status.bytes));
        match spawned {
            Ok(pid) => {
                record(report, expect, measured);
                Ok(pid)
            }
            Err(err) => match measured {
                Some(measured) if self.strict && measured.short_of(expect) => {
                    let mut seen = report.clone();
                    record(&mut seen, expect, Some(measured));
                    Err(io::Error::other(ConfineError::NotEnforceable {
                        profile: report.profile.clone(),
                        notes: reasons(&seen),
                    }))
                }
                _ => Err(err),
            },
        }
    }
}

/// Moves the calling process (one thread: a child before its exec) into the cgroup whose join file
/// ([`PidsCgroup::join`](super::cgroup::PidsCgroup::join)) is `join`. It writes `0`, which the
/// kernel reads as "the writer": no pid to format, whatever pid namespace agentd is in.
pub(super) fn join_cgroup(join: &OwnedFd) -> Result<(), i32> {
    let written = crate::syscall::write(join.as_raw_fd(), b"0")?;
    if written == 1 { Ok(()) } else { Err(libc::EIO) }
}
