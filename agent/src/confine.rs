//! Confinement: a [`SandboxProfile`] applied to each command's own process, after fork and before
//! exec, so agentd itself stays unconfined and can still serve, kill and clean up.
//!
//! Order in the child ([`Plan::enter`]), each step before the next for a reason:
//! 1. `setsid`: its own session and process group, so the kill ladder reaches all of it;
//! 2. join the per-command pids cgroup, so every process it forks counts against `processes`;
//! 3. rlimits (core dumps off always), while nothing else can still fail halfway;
//! 4. `no_new_privs`, then landlock (filesystem and TCP rules) last: landlock needs `no_new_privs`
//!    for an unprivileged caller, and once it is in force the child could no longer open what it
//!    needs for the steps above.
//!
//! Everything that allocates or opens files (the landlock ruleset, the cgroup, the environment) is
//! prepared in the parent by [`Confiner::plan`]; the child only makes system calls.
//!
//! Landlock also forbids a confined process to ptrace, or read `/proc/<pid>/{environ,mem}` of, a
//! process outside its domain: agentd's own memory and environment are out of reach.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use agentd_protocol::profile::{Enforcement, Level, Limits, Mode, Network, SandboxProfile};
use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible as _, PathBeneath, PathFd, Ruleset,
    RulesetAttr as _, RulesetCreated, RulesetCreatedAttr as _,
};
use rlimit::Resource;
use thiserror::Error;

use crate::admission::ServerProfile;

/// The landlock ABI our rules are written for (filesystem rights up to `IoctlDev`, TCP rules).
const RULES_ABI: ABI = ABI::V5;

#[derive(Debug, Error)]
pub enum ConfineError {
    #[error("cannot read the profile `{path}`: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("the profile `{path}` is not valid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("strict profile `{profile}` cannot be fully enforced here, so nothing was run: {notes}")]
    NotEnforceable { profile: String, notes: String },
    #[error("profile `{profile}`: cannot prepare its rules: {message}")]
    Prepare { profile: String, message: String },
}

/// The server's profile and what this machine offers to enforce it.
pub struct Confiner {
    profile: SandboxProfile,
    /// Names the per-command cgroups.
    next_plan: std::sync::atomic::AtomicU64,
    abi: u32,
    /// Parent of the per-command pids cgroups, when agentd can create them; made on first need (a
    /// profile with `limits.processes`), so an agentd that never needs one leaves no trace.
    cgroups: std::sync::OnceLock<Option<PathBuf>>,
}

impl Confiner {
    /// Reads a profile (JSON when the file name ends in `.json`, else TOML), validates it and
    /// resolves its roots.
    pub fn load(path: &Path) -> Result<ServerProfile, ConfineError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfineError::Read { path: path.to_owned(), source })?;
        let parse = |message: String| ConfineError::Parse { path: path.to_owned(), message };
        let profile: SandboxProfile = if path.extension().is_some_and(|e| e == "json") {
            serde_json::from_str(&text).map_err(|e| parse(e.to_string()))?
        } else {
            toml::from_str(&text).map_err(|e| parse(e.to_string()))?
        };
        ServerProfile::new(profile).map_err(|e| parse(e.to_string()))
    }

    pub fn new(profile: SandboxProfile) -> Self {
        Self {
            profile,
            next_plan: Default::default(),
            abi: kernel_landlock_abi(),
            cgroups: Default::default(),
        }
    }

    /// The kernel's landlock ABI (0: none).
    pub fn landlock_abi(&self) -> u32 {
        self.abi
    }

    /// What of the server's profile this machine can enforce (for `hello`).
    pub fn capability(&self) -> Enforcement {
        self.report(&self.profile)
    }

    /// Prepares everything the child will apply, and the report of it. A strict profile whose rules
    /// cannot all be enforced is refused here, before anything runs.
    pub fn plan(&self, profile: &SandboxProfile) -> Result<Plan, ConfineError> {
        let seq = self.next_plan.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let report = self.report(profile);
        if report.mode == Mode::Strict && report.level != Level::Full && report.level != Level::NotRequested {
            return Err(ConfineError::NotEnforceable {
                profile: profile.name.clone(),
                notes: report.notes.join("; "),
            });
        }
        let prepare = |message: String| ConfineError::Prepare { profile: profile.name.clone(), message };
        let ruleset = if asks_for_landlock(profile) && self.abi > 0 {
            Some(build_ruleset(profile).map_err(prepare)?)
        } else {
            None
        };
        let cgroup = match profile.limits.processes.and_then(|max| Some((max, self.cgroup_parent()?))) {
            Some((max, parent)) => {
                Some(PidsCgroup::create(parent, seq, max).map_err(|e| prepare(e.to_string()))?)
            }
            None => None,
        };
        let mut rlimits = vec![(Resource::CORE, 0, 0)];
        let limits = &profile.limits;
        // A hard CPU limit one second above the soft one: the command gets SIGXCPU (which the
        // result can name) rather than an anonymous SIGKILL.
        rlimits.extend(limits.cpu_seconds.map(|v| (Resource::CPU, v, v.saturating_add(1))));
        rlimits.extend(limits.address_space.map(|v| (Resource::AS, v, v)));
        rlimits.extend(limits.file_size.map(|v| (Resource::FSIZE, v, v)));
        rlimits.extend(limits.open_files.map(|v| (Resource::NOFILE, v, v)));
        // Without a cgroup, the per-user process limit is the fallback (it does not bind uid 0).
        if cgroup.is_none() {
            rlimits.extend(limits.processes.map(|v| (Resource::NPROC, v, v)));
        }
        let cgroup_procs = match &cgroup {
            Some(cgroup) => Some(cgroup.procs.try_clone().map_err(|e| prepare(e.to_string()))?),
            None => None,
        };
        Ok(Plan { report, child: ChildSteps { ruleset, rlimits, cgroup_procs }, cgroup })
    }

    /// What would be enforced for `profile` on this machine.
    fn report(&self, profile: &SandboxProfile) -> Enforcement {
        let mut notes = Vec::new();
        let abi_short = profile.landlock_abi.filter(|need| *need > self.abi);
        let landlock_level = |what: &str, min_abi: u32, notes: &mut Vec<String>| {
            if self.abi < min_abi {
                notes.push(format!("{what} needs landlock ABI {min_abi}, the kernel has {}", self.abi));
                Level::NotEnforced
            } else if let Some(need) = abi_short {
                notes.push(format!(
                    "{what}: the profile requires landlock ABI {need}, the kernel has {}",
                    self.abi
                ));
                Level::Partial
            } else {
                Level::Full
            }
        };
        let filesystem = if profile.writable_roots.is_some() || profile.readable_roots.is_some() {
            landlock_level("filesystem rules", 1, &mut notes)
        } else {
            Level::NotRequested
        };
        let network = match profile.network {
            Network::Deny => landlock_level("network = \"deny\"", 4, &mut notes),
            Network::Allow => Level::NotRequested,
        };
        let limits = if profile.limits == Limits::default() {
            Level::NotRequested
        } else if profile.limits.processes.is_some()
            && self.cgroup_parent().is_none()
            && nix::unistd::geteuid().is_root()
        {
            notes.push(
                "processes: no pids cgroup could be created and RLIMIT_NPROC does not bind uid 0".to_owned(),
            );
            Level::Partial
        } else {
            Level::Full
        };
        let level = [filesystem, network, limits].into_iter().filter(|l| *l != Level::NotRequested).min();
        let mode =
            profile.mode.unwrap_or(if asks_for_landlock(profile) { Mode::Strict } else { Mode::BestEffort });
        Enforcement {
            profile: profile.name.clone(),
            mode,
            level: level.unwrap_or(Level::NotRequested),
            landlock_abi: self.abi,
            filesystem,
            network,
            limits,
            notes,
        }
    }
}

/// One command's confinement: the report, what the child applies, and what the parent cleans up.
pub struct Plan {
    pub report: Enforcement,
    child: ChildSteps,
    cgroup: Option<PidsCgroup>,
}

impl Plan {
    pub fn into_parts(self) -> (Enforcement, ChildSteps, Cleanup) {
        (self.report, self.child, Cleanup { _cgroup: self.cgroup })
    }
}

/// What remains to undo once the command ended.
pub struct Cleanup {
    /// Held for its `Drop`.
    _cgroup: Option<PidsCgroup>,
}

impl Cleanup {
    /// Removes the command's cgroup (its tree is gone by now).
    pub fn finish(self) {
        drop(self);
    }
}

/// What the child applies to itself between fork and exec; prepared by the parent.
pub struct ChildSteps {
    ruleset: Option<RulesetCreated>,
    rlimits: Vec<(Resource, u64, u64)>,
    /// A duplicate of the command's `cgroup.procs`.
    cgroup_procs: Option<OwnedFd>,
}

impl ChildSteps {
    /// Runs in the child: system calls only, nothing allocated.
    pub fn enter(&mut self) -> io::Result<()> {
        nix::unistd::setsid().map_err(io::Error::from)?;
        if let Some(procs) = &self.cgroup_procs {
            join_cgroup(procs)?;
        }
        for (resource, soft, hard) in &self.rlimits {
            resource.set(*soft, *hard)?;
        }
        nix::sys::prctl::set_no_new_privs().map_err(io::Error::from)?;
        if let Some(ruleset) = self.ruleset.take() {
            ruleset.restrict_self().map_err(|_| io::Error::from(io::ErrorKind::PermissionDenied))?;
        }
        Ok(())
    }
}

/// `write(procs, getpid())`, the number formatted on the stack.
fn join_cgroup(procs: &OwnedFd) -> io::Result<()> {
    let mut digits = [0u8; 20];
    let mut pid = std::process::id();
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (pid % 10) as u8;
        pid /= 10;
        if pid == 0 {
            break;
        }
    }
    let written = nix::unistd::write(procs, &digits[at..]).map_err(io::Error::from)?;
    if written == digits.len() - at { Ok(()) } else { Err(io::ErrorKind::WriteZero.into()) }
}

fn asks_for_landlock(profile: &SandboxProfile) -> bool {
    profile.writable_roots.is_some() || profile.readable_roots.is_some() || profile.network == Network::Deny
}

fn build_ruleset(profile: &SandboxProfile) -> Result<RulesetCreated, String> {
    let error = |e: landlock::RulesetError| e.to_string();
    let mut ruleset = Ruleset::default().set_compatibility(CompatLevel::BestEffort);
    let filesystem = profile.writable_roots.is_some() || profile.readable_roots.is_some();
    if filesystem {
        ruleset = ruleset.handle_access(AccessFs::from_all(RULES_ABI)).map_err(error)?;
    }
    if profile.network == Network::Deny {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp).map_err(error)?;
    }
    let mut created = ruleset.create().map_err(error)?;
    if filesystem {
        let read = AccessFs::from_read(RULES_ABI);
        let all = AccessFs::from_all(RULES_ABI);
        let readable = profile.readable_roots.clone().unwrap_or_else(|| vec!["/".to_owned()]);
        for root in &readable {
            created = add_path(created, root, read)?;
        }
        // Writable roots default to nothing when only readable roots are given.
        for root in profile.writable_roots.iter().flatten() {
            created = add_path(created, root, all)?;
        }
        // Every shell writes to /dev/null.
        created = add_path(created, "/dev/null", AccessFs::from_file(RULES_ABI))?;
    }
    Ok(created)
}

fn add_path(
    ruleset: RulesetCreated,
    path: &str,
    access: landlock::BitFlags<AccessFs>,
) -> Result<RulesetCreated, String> {
    match PathFd::new(path) {
        // A file gets only the rights that apply to files.
        Ok(fd) => {
            let access =
                if Path::new(path).is_dir() { access } else { access & AccessFs::from_file(RULES_ABI) };
            ruleset.add_rule(PathBeneath::new(fd, access)).map_err(|e| format!("{path}: {e}"))
        }
        // A root that does not exist grants nothing.
        Err(_) => Ok(ruleset),
    }
}

/// The kernel's landlock ABI: `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`.
fn kernel_landlock_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag the kernel only returns the
    // ABI number (or -1 with errno); no memory is read or written.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(abi).unwrap_or(0)
}

/// Where agentd can create pids cgroups: beneath its own pids cgroup (so every limit on agentd
/// bounds its commands too; a cgroup at the hierarchy's root once gave a command more processes than
/// agentd itself was allowed), in a directory `agentd-<pid>` with one child per command.
fn pids_cgroup_parent() -> Option<PathBuf> {
    let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let own = own_pids_cgroup(&membership, &mounts)?;
    let dir = own.dir.join(format!("agentd-{}", std::process::id()));
    if own.v2 {
        // v2: the controller must be enabled for our children and for theirs.
        std::fs::write(own.dir.join("cgroup.subtree_control"), "+pids").ok()?;
        std::fs::create_dir_all(&dir).ok()?;
        if std::fs::write(dir.join("cgroup.subtree_control"), "+pids").is_err() {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        return Some(dir);
    }
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir)
}

/// agentd's own pids cgroup directory.
#[derive(Debug, PartialEq, Eq)]
struct OwnCgroup {
    dir: PathBuf,
    v2: bool,
}

/// Finds the directory of our pids cgroup from `/proc/self/cgroup` and `/proc/self/mountinfo`: the
/// v1 hierarchy that has `pids`, else the v2 one (when it offers `pids`, checked by the caller's
/// write). Pure.
fn own_pids_cgroup(membership: &str, mountinfo: &str) -> Option<OwnCgroup> {
    // mountinfo: `id parent dev ROOT MOUNTPOINT opts… - FSTYPE SOURCE SUPEROPTS`.
    let mount = |v2: bool| {
        mountinfo.lines().find_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut right = right.split(' ');
            let fstype = right.next()?;
            let superopts = right.nth(1)?;
            let wanted = if v2 {
                fstype == "cgroup2"
            } else {
                fstype == "cgroup" && superopts.split(',').any(|o| o == "pids")
            };
            let mut left = left.split(' ');
            let root = left.nth(3)?;
            let point = left.next()?;
            wanted.then(|| (root.to_owned(), PathBuf::from(point)))
        })
    };
    let within = |(root, point): (String, PathBuf), path: &str| {
        // The mount shows the hierarchy from `root` down; our path is absolute in the hierarchy.
        let relative = Path::new(path).strip_prefix(&root).ok()?;
        Some(point.join(relative))
    };
    for line in membership.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        if controllers.split(',').any(|c| c == "pids") {
            return Some(OwnCgroup { dir: within(mount(false)?, path)?, v2: false });
        }
    }
    let path = membership.lines().find_map(|line| line.strip_prefix("0::"))?;
    Some(OwnCgroup { dir: within(mount(true)?, path)?, v2: true })
}

impl Confiner {
    fn cgroup_parent(&self) -> Option<&PathBuf> {
        self.cgroups.get_or_init(pids_cgroup_parent).as_ref()
    }

    /// Removes agentd's cgroups at shutdown, once every process is gone.
    pub fn remove_cgroups(&self) {
        let Some(Some(parent)) = self.cgroups.get() else { return };
        if let Ok(children) = std::fs::read_dir(parent) {
            for child in children.flatten() {
                let _ = std::fs::remove_dir(child.path());
            }
        }
        let _ = std::fs::remove_dir(parent);
    }
}

/// One command's pids cgroup.
struct PidsCgroup {
    dir: PathBuf,
    /// `cgroup.procs`, opened by the parent: the child writes its own pid there.
    procs: OwnedFd,
}

impl PidsCgroup {
    fn create(parent: &Path, seq: u64, max: u64) -> io::Result<Self> {
        let dir = parent.join(seq.to_string());
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("pids.max"), max.to_string())?;
        let procs = File::options().write(true).open(dir.join("cgroup.procs"))?;
        Ok(Self { dir, procs: procs.into() })
    }
}

impl Drop for PidsCgroup {
    /// Removes the cgroup; it fails (harmlessly) while a background process still lives in it, and
    /// shutdown sweeps what is left.
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_pids_cgroup_is_found_in_v1_and_v2() {
        let v1_mounts = "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
            36 31 0:33 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n";
        let v1 = "9:name=systemd:/\n8:pids:/user.slice/job\n0::/\n";
        assert_eq!(
            own_pids_cgroup(v1, v1_mounts),
            Some(OwnCgroup { dir: PathBuf::from("/sys/fs/cgroup/pids/user.slice/job"), v2: false })
        );
        // A container whose mount shows the hierarchy from its own cgroup down.
        let ns_mounts = "40 31 0:33 /docker/abc /sys/fs/cgroup/pids ro - cgroup cgroup rw,pids\n";
        assert_eq!(
            own_pids_cgroup("4:pids:/docker/abc/sub\n", ns_mounts),
            Some(OwnCgroup { dir: PathBuf::from("/sys/fs/cgroup/pids/sub"), v2: false })
        );
        let v2_mounts = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            own_pids_cgroup("0::/system.slice/agentd.service\n", v2_mounts),
            Some(OwnCgroup { dir: PathBuf::from("/sys/fs/cgroup/system.slice/agentd.service"), v2: true })
        );
        assert_eq!(own_pids_cgroup("0::/x\n", v1_mounts), None, "no v2 mount");
        assert_eq!(own_pids_cgroup("", v2_mounts), None);
    }
}
