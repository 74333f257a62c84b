//! Confinement: a [`SandboxProfile`] applied to each command's own process, after clone and before
//! exec, so agentd itself stays unconfined and can still serve, kill and clean up.
//!
//! Order in the child, each step before the next for a reason:
//! 1. `setsid` (as every command does, [`crate::exec::spawn`]): its own session and process group,
//!    so the kill ladder reaches all of it; then [`ChildSteps::enter`]:
//! 2. join the per-command pids cgroup, so every process it forks counts against `processes`;
//! 3. rlimits (core dumps off always), while nothing else can still fail halfway;
//! 4. `no_new_privs`, then landlock (filesystem rules, TCP rules, scopes): landlock needs
//!    `no_new_privs` for an unprivileged caller, and once it is in force the child could no longer
//!    open what it needs for the steps above;
//! 5. the seccomp filter of `network = "deny"` ([`seccomp`]) last, so no step above meets it;
//! 6. what landlock and seccomp reported goes back to the parent through the memory they share until
//!    the exec ([`ChildStatus`]), and a strict profile that got less than it asked for stops here:
//!    `spawn` fails and nothing runs.
//!
//! Everything that allocates or opens files (the landlock ruleset, the seccomp program, the cgroup,
//! the environment) is prepared in the parent by [`Confiner::plan`]; the child only makes system
//! calls. What a plan prepares is kept for the next: the ruleset while nothing it was built from
//! changes ([`watch`] tells without looking up a path), the report's link notes, the emptied
//! cgroups. [`Confiner::plan_ready`] assembles a plan from those alone, on the runtime; only when
//! something is missing or stale does [`Confiner::plan`] run, off it.
//!
//! Every command under a profile is kept from agentd's withheld paths ([`carve`]): its token file
//! and the cgroup tree. Whenever landlock is applied, from ABI 6 the command's signals are scoped to
//! its own domain: it cannot signal agentd, another exec's processes or anything else outside. That
//! costs nothing a command legitimately needs (its own tree shares its domain) and closes the
//! simplest way out of a sandbox, so it is not a profile option.
//!
//! Landlock also forbids a confined process to ptrace, or read `/proc/<pid>/{environ,mem}` of, a
//! process outside its domain: agentd's own memory and environment are out of reach.

mod carve;
#[cfg(test)]
mod report_tests;
mod seccomp;
mod watch;

pub use carve::{Withheld, agentd_withheld};

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentd_protocol::profile::{Enforcement, Level, Limits, Mode, Network, SandboxProfile};
use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible as _, Ruleset, RulesetAttr as _,
    RulesetCreated, Scope,
};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use seccompiler::BpfProgram;
use thiserror::Error;

use crate::admission::ServerProfile;

/// The landlock ABI our filesystem rules are written for (rights up to `IoctlDev`).
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
    /// The seccomp program of `network = "deny"`, built once; `None` where this build or kernel has
    /// no seccomp filter.
    network_filter: Option<Arc<BpfProgram>>,
    /// Kept from every command under a profile.
    withheld: Vec<Withheld>,
    /// Rulesets built for earlier commands, reused while unchanged (a few, oldest dropped first).
    rulesets: std::sync::Mutex<Vec<CachedRuleset>>,
    /// Tells that what the cached rulesets and link notes were built from is unchanged, without
    /// looking at it; `None` where inotify is missing (everything is then looked at again).
    watch: Option<watch::Watch>,
    /// The withheld files' link notes, with the generation of `watch` they were taken at.
    link_notes: std::sync::Mutex<Option<(u64, Vec<String>)>>,
    /// Parent of the per-command pids cgroups, when agentd can create them; made on first need (a
    /// profile with `limits.processes`), so an agentd that never needs one leaves no trace.
    cgroups: std::sync::OnceLock<Option<CgroupParent>>,
    /// Per-command cgroups that held a finished command and are empty again, kept for the next
    /// commands.
    idle_cgroups: Arc<IdleCgroups>,
    /// agentd runs as uid 0 (RLIMIT_NPROC does not bind it): asked once, not per report.
    root: bool,
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

    /// `withheld`: paths kept from every command under a profile (see [`agentd_withheld`]).
    pub fn new(profile: SandboxProfile, withheld: Vec<Withheld>) -> Self {
        let network_filter = if seccomp::kernel_has_seccomp() {
            match seccomp::network_filter() {
                Ok(program) => Some(Arc::new(program)),
                Err(err) => {
                    tracing::warn!("network = \"deny\" will lack its seccomp filter: {err}");
                    None
                }
            }
        } else {
            None
        };
        Self {
            profile,
            next_plan: Default::default(),
            abi: kernel_landlock_abi(),
            network_filter,
            withheld,
            rulesets: Default::default(),
            watch: watch::Watch::new(),
            link_notes: Default::default(),
            cgroups: Default::default(),
            idle_cgroups: Arc::new(IdleCgroups::new()),
            root: nix::unistd::geteuid().is_root(),
        }
    }

    /// Removes the idle cgroups kept beyond the few kept for good ([`IdleCgroups::trim`]), when
    /// agentd is idle again. Path work: off the runtime.
    pub fn trim_idle_cgroups(&self) {
        drop(self.idle_cgroups.trim());
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
    /// cannot all be enforced is refused here, before anything runs. Looks at the file system and
    /// the cgroup tree: off the runtime.
    pub fn plan(&self, profile: &SandboxProfile) -> Result<Plan, ConfineError> {
        self.make_plan(profile, true).unwrap_or_else(|| {
            Err(ConfineError::Prepare {
                profile: profile.name.clone(),
                message: "nothing was prepared".into(),
            })
        })
    }

    /// The plan [`Confiner::plan`] would make, assembled from what earlier plans prepared and what
    /// has not changed since ([`watch`]): a cached ruleset, the link notes, an idle pids cgroup. No
    /// path is looked up and nothing waits, so it runs on the runtime. `None`: something is missing
    /// or may be stale, and [`Confiner::plan`] must run (off the runtime).
    pub fn plan_ready(&self, profile: &SandboxProfile) -> Option<Result<Plan, ConfineError>> {
        self.make_plan(profile, false)
    }

    /// `build`: make what is missing (blocking work); else `None` when anything is.
    fn make_plan(&self, profile: &SandboxProfile, build: bool) -> Option<Result<Plan, ConfineError>> {
        // What has changed is read once for the whole plan.
        let now = if build { None } else { Some(self.watch.as_ref().map(watch::Watch::current)) };
        let links = match now {
            // Watched again only when stale: a plan is also made here when only a cgroup was missing.
            None => self
                .links_ready(self.watch.as_ref().map(watch::Watch::current))
                .unwrap_or_else(|| self.links()),
            Some(now) => self.links_ready(now)?,
        };
        // Made on first need only.
        let cgroups = match (profile.limits.processes, build) {
            (None, _) => None,
            (Some(_), true) => self.cgroup_parent(),
            (Some(_), false) => self.cgroups.get()?.as_ref().map(|parent| &parent.dir),
        };
        let report = self.report_with(profile, links, cgroups.is_some());
        let want = intent(profile, self.abi, self.network_filter.is_some(), !self.withheld.is_empty());
        let strict = report.mode == Mode::Strict;
        if strict && report.level != Level::Full && report.level != Level::NotRequested {
            return Some(Err(ConfineError::NotEnforceable {
                profile: profile.name.clone(),
                notes: reasons(&report),
            }));
        }
        let prepare = |message: String| ConfineError::Prepare { profile: profile.name.clone(), message };
        let ruleset = match (want.landlock, now) {
            (false, _) => None,
            (true, None) => match self.ruleset(profile, want) {
                Ok(ruleset) => Some(ruleset),
                Err(err) => return Some(Err(prepare(err))),
            },
            (true, Some(now)) => Some(self.ruleset_ready(profile, want, now?)?),
        };
        let filter = if want.seccomp { self.network_filter.clone() } else { None };
        let mut rlimits = vec![(libc::RLIMIT_CORE, 0, 0)];
        let limits = &profile.limits;
        // A hard CPU limit one second above the soft one: the command gets SIGXCPU (which the
        // result can name) rather than an anonymous SIGKILL.
        rlimits.extend(limits.cpu_seconds.map(|v| (libc::RLIMIT_CPU, v, v.saturating_add(1))));
        rlimits.extend(limits.address_space.map(|v| (libc::RLIMIT_AS, v, v)));
        rlimits.extend(limits.file_size.map(|v| (libc::RLIMIT_FSIZE, v, v)));
        rlimits.extend(limits.open_files.map(|v| (libc::RLIMIT_NOFILE, v, v)));
        // Last: the one step that takes something (an idle cgroup), so nothing is left to give back
        // when an earlier step was not ready.
        let seq = self.next_plan.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let cgroup = match profile.limits.processes.zip(cgroups) {
            Some((max, parent)) => {
                let made = if build {
                    self.pids_cgroup(parent, seq, max)
                } else {
                    match self.idle_cgroup(max) {
                        Ok(idle) => Ok(idle?),
                        Err((cgroup, _)) => {
                            // Given back: removing it is path work; `plan` meets the error off the
                            // runtime.
                            drop(self.idle_cgroups.keep(cgroup));
                            return None;
                        }
                    }
                };
                match made {
                    Ok(cgroup) => Some(cgroup),
                    Err(err) => return Some(Err(prepare(err.to_string()))),
                }
            }
            None => None,
        };
        // Without a cgroup, the per-user process limit is the fallback (it does not bind uid 0).
        if cgroup.is_none() {
            rlimits.extend(limits.processes.map(|v| (libc::RLIMIT_NPROC, v, v)));
        }
        let cgroup_join = match &cgroup {
            Some(cgroup) => match cgroup.join.try_clone() {
                Ok(join) => Some(join),
                Err(err) => return Some(Err(prepare(err.to_string()))),
            },
            None => None,
        };
        Some(Ok(Plan {
            report,
            child: ChildSteps {
                // A ruleset the crate made no descriptor for: landlock is not there.
                ruleset: ruleset.map(Option::<OwnedFd>::from),
                filter,
                strict,
                rlimits,
                cgroup_join,
            },
            cgroup,
            idle_cgroups: Arc::clone(&self.idle_cgroups),
        }))
    }

    /// An idle per-command cgroup with its limit set to `max` (a write to a file it holds open, no
    /// path looked up; the list's lock is only ever held to push or pop); `None` when there is none.
    /// One whose limit cannot be set comes back with the error, still to be removed.
    fn idle_cgroup(&self, max: u64) -> Result<Option<PidsCgroup>, (PidsCgroup, io::Error)> {
        match self.idle_cgroups.take() {
            None => Ok(None),
            Some(mut cgroup) => match cgroup.set_max(max) {
                Ok(()) => Ok(Some(cgroup)),
                Err(err) => Err((cgroup, err)),
            },
        }
    }

    /// A per-command pids cgroup allowing `max` tasks: an idle one (its limit set again: the kill
    /// ladder sets it to 0), else a new one.
    fn pids_cgroup(&self, parent: &Path, seq: u64, max: u64) -> io::Result<PidsCgroup> {
        match self.idle_cgroup(max) {
            Ok(Some(cgroup)) => Ok(cgroup),
            Ok(None) => PidsCgroup::create(parent, seq, max),
            // Dropped here, off the runtime: removing it is path work.
            Err((_, err)) => Err(err),
        }
    }

    /// The landlock ruleset for `profile`: a copy of one built before when nothing it was built from
    /// changed (building lists the directories around withheld paths: tens of system calls), else a
    /// new one. Either way it is watched afterwards, for [`Confiner::ruleset_ready`].
    fn ruleset(&self, profile: &SandboxProfile, want: Intent) -> Result<RulesetCreated, String> {
        let mut cache = self.rulesets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let found = cache.iter().position(|c| c.key.is(profile, want));
        let at = match found {
            Some(at) if self.fresh(cache[at].watched) || carve::unchanged(&cache[at].seen) => at,
            found => {
                if let Some(at) = found {
                    cache.remove(at);
                }
                let mut seen = Vec::new();
                let ruleset = build_ruleset(profile, &want, self.abi, &self.withheld, &mut seen)?;
                if cache.len() >= CACHED_RULESETS {
                    cache.remove(0);
                }
                let key = RulesetKey {
                    writable_roots: profile.writable_roots.clone(),
                    readable_roots: profile.readable_roots.clone(),
                    want,
                };
                cache.push(CachedRuleset { key, seen, ruleset, watched: None });
                cache.len() - 1
            }
        };
        let cached = &mut cache[at];
        if !self.fresh(cached.watched) {
            cached.watched = self.watch_ruleset(&cached.seen);
        }
        // A second descriptor of the same kernel ruleset; nothing adds rules to it any more.
        cached.ruleset.try_clone().map_err(|e| e.to_string())
    }

    /// A copy of the cached ruleset for `profile`, if it is watched and nothing it was built from
    /// changed since (the watch is at generation `now`): no path looked up, no waiting for a lock.
    fn ruleset_ready(&self, profile: &SandboxProfile, want: Intent, now: u64) -> Option<RulesetCreated> {
        let cache = self.rulesets.try_lock().ok()?;
        let cached = cache.iter().find(|c| c.key.is(profile, want))?;
        if cached.watched != Some(now) {
            return None;
        }
        cached.ruleset.try_clone().ok()
    }

    /// Watches what a ruleset was built from; the generation at which it is known unchanged, when
    /// all of it could be watched and nothing changed between the listing and the watching.
    fn watch_ruleset(&self, seen: &[carve::Seen]) -> Option<u64> {
        let watch = self.watch.as_ref()?;
        let all = seen.iter().all(|s| {
            watch.add(s.path(), if s.listed() { watch::Watched::Listed } else { watch::Watched::Identity })
        });
        let generation = watch.settle();
        (all && carve::unchanged(seen)).then_some(generation)
    }

    /// Nothing watched at `generation` has changed since.
    fn fresh(&self, generation: Option<u64>) -> bool {
        match (&self.watch, generation) {
            (Some(watch), Some(generation)) => watch.fresh(generation),
            _ => false,
        }
    }

    /// Notes on withheld files that have other names (hard links), looked at now (without
    /// landlock nothing is withheld, so nothing is noted).
    fn links_now(&self) -> Vec<String> {
        if self.abi == 0 { Vec::new() } else { carve::link_notes(&self.withheld) }
    }

    /// [`Confiner::links_now`], and the withheld files watched for [`Confiner::links_ready`].
    fn links(&self) -> Vec<String> {
        let Some(watch) = self.watch.as_ref().filter(|_| self.abi > 0) else { return self.links_now() };
        let watched = self.withheld.iter().all(|w| watch.add(&w.path, watch::Watched::Attributes));
        let generation = watch.settle();
        let notes = self.links_now();
        *self.link_notes.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            watched.then(|| (generation, notes.clone()));
        notes
    }

    /// The link notes of the last plan, if nothing they were taken from changed since (the watch
    /// is at generation `now`; `None`: there is no watch).
    fn links_ready(&self, now: Option<u64>) -> Option<Vec<String>> {
        if self.abi == 0 {
            return Some(Vec::new());
        }
        let cached = self.link_notes.try_lock().ok()?;
        let (generation, notes) = cached.as_ref()?;
        (Some(*generation) == now).then(|| notes.clone())
    }

    /// What would be enforced for `profile` on this machine (for `hello`: it watches nothing).
    fn report(&self, profile: &SandboxProfile) -> Enforcement {
        let cgroups = profile.limits.processes.is_some() && self.cgroup_parent().is_some();
        let now = self.watch.as_ref().map(watch::Watch::current);
        let links = self.links_ready(now).unwrap_or_else(|| self.links_now());
        self.report_with(profile, links, cgroups)
    }

    /// The report, given the withheld files' link notes and whether pids cgroups can be made.
    fn report_with(&self, profile: &SandboxProfile, links: Vec<String>, cgroups: bool) -> Enforcement {
        let processes_contained = profile.limits.processes.is_none() || cgroups || !self.root;
        let machine = Machine { abi: self.abi, seccomp: self.network_filter.is_some(), processes_contained };
        let mut report = enforcement(profile, &machine, &self.withheld);
        // A withheld file's other names are not withheld (links come and go).
        if !links.is_empty() {
            lower(&mut report.filesystem, Level::Partial);
            report.notes.extend(links);
            report.level = overall(&report);
        }
        report
    }
}

/// How many rulesets are kept for reuse (one per distinct set of roots and network rules).
const CACHED_RULESETS: usize = 8;

/// What shapes a ruleset.
#[derive(Debug, PartialEq)]
struct RulesetKey {
    writable_roots: Option<Vec<String>>,
    readable_roots: Option<Vec<String>>,
    want: Intent,
}

impl RulesetKey {
    fn is(&self, profile: &SandboxProfile, want: Intent) -> bool {
        self.writable_roots == profile.writable_roots
            && self.readable_roots == profile.readable_roots
            && self.want == want
    }
}

struct CachedRuleset {
    key: RulesetKey,
    seen: Vec<carve::Seen>,
    ruleset: RulesetCreated,
    /// The generation of [`Confiner::watch`] at which it was known unchanged; `None`: not watched.
    watched: Option<u64>,
}

/// What the report depends on, besides the profile.
#[derive(Debug, Clone, Copy)]
struct Machine {
    /// The kernel's landlock ABI.
    abi: u32,
    /// The seccomp filter of `network = "deny"` exists for this build and kernel.
    seccomp: bool,
    /// `limits.processes` binds: a pids cgroup can be made, or RLIMIT_NPROC binds (not uid 0).
    processes_contained: bool,
}

/// What `profile` gets on `machine`, rule by rule, with the reasons for anything less than full.
fn enforcement(profile: &SandboxProfile, machine: &Machine, withheld: &[Withheld]) -> Enforcement {
    let abi = machine.abi;
    let mut notes = Vec::new();
    let abi_short = profile.landlock_abi.filter(|need| *need > abi);
    let landlock_level = |what: &str, min_abi: u32, notes: &mut Vec<String>| {
        if abi < min_abi {
            notes.push(format!("{what}: needs landlock ABI {min_abi}, the kernel has {abi}"));
            Level::NotEnforced
        } else if let Some(need) = abi_short {
            notes.push(format!("{what}: the profile requires landlock ABI {need}, the kernel has {abi}"));
            Level::Partial
        } else {
            Level::Full
        }
    };
    let fs_rules = has_fs_rules(profile);
    let filesystem = if fs_rules || !withheld.is_empty() {
        let what = if fs_rules { "filesystem rules" } else { "withheld paths" };
        match landlock_level(what, 1, &mut notes) {
            Level::Full if abi < 3 => {
                notes.push(format!(
                    "{what}: truncate(2) is refused only from landlock ABI 3, the kernel has {abi}"
                ));
                Level::Partial
            }
            Level::NotEnforced if !withheld.is_empty() => {
                notes.push("without landlock, commands can read and write what agentd withholds".to_owned());
                Level::NotEnforced
            }
            level => level,
        }
    } else {
        Level::NotRequested
    };
    let deny = profile.network == Network::Deny;
    let network = if deny {
        let what = "network = \"deny\"";
        match (machine.seccomp, abi) {
            (true, 1..) => landlock_level(what, 1, &mut notes),
            (true, 0) => {
                notes.push(format!(
                    "{what}: sockets are refused (seccomp), but without landlock a command can ptrace a \
                     process outside its sandbox and use its network"
                ));
                Level::Partial
            }
            (false, 4..) => {
                notes.push(format!(
                    "{what}: no seccomp filter on this machine, so only TCP bind and connect are refused \
                     (landlock): UDP, raw and Unix sockets stay open"
                ));
                landlock_level(what, 4, &mut notes).min(Level::Partial)
            }
            (false, _) => {
                notes.push(format!(
                    "{what}: needs a seccomp filter or landlock ABI 4; this machine has neither"
                ));
                Level::NotEnforced
            }
        }
    } else {
        Level::NotRequested
    };
    let signals =
        if fs_rules || deny { landlock_level("signal scoping", 6, &mut notes) } else { Level::NotRequested };
    let limits = if profile.limits == Limits::default() {
        Level::NotRequested
    } else if !machine.processes_contained {
        notes.push(
            "processes: no pids cgroup could be created and RLIMIT_NPROC does not bind uid 0".to_owned(),
        );
        Level::Partial
    } else {
        Level::Full
    };
    let mode =
        profile.mode.unwrap_or(if asks_for_landlock(profile) { Mode::Strict } else { Mode::BestEffort });
    if !withheld.is_empty() {
        let what: Vec<String> = withheld.iter().map(Withheld::describe).collect();
        notes.push(format!("withheld: {}", what.join(", ")));
    }
    let mut report = Enforcement {
        profile: profile.name.clone(),
        mode,
        level: Level::NotRequested,
        landlock_abi: abi,
        filesystem,
        network,
        signals,
        limits,
        notes,
    };
    report.level = overall(&report);
    report
}

/// The notes that say why something is less than full.
fn reasons(report: &Enforcement) -> String {
    let reasons: Vec<&str> =
        report.notes.iter().map(String::as_str).filter(|n| !n.starts_with("withheld:")).collect();
    reasons.join("; ")
}

/// The weakest level among the rules asked for.
fn overall(report: &Enforcement) -> Level {
    [report.filesystem, report.network, report.signals, report.limits]
        .into_iter()
        .filter(|l| *l != Level::NotRequested)
        .min()
        .unwrap_or(Level::NotRequested)
}

/// Lowers a rule that was asked for to at most `to`.
fn lower(level: &mut Level, to: Level) {
    if *level != Level::NotRequested && *level > to {
        *level = to;
    }
}

/// What the child asks of landlock and seccomp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Intent {
    /// A landlock domain (filesystem rules: the profile's, or "everything" less what is withheld).
    landlock: bool,
    tcp: bool,
    abstract_sockets: bool,
    signals: bool,
    seccomp: bool,
}

fn intent(profile: &SandboxProfile, abi: u32, filter: bool, withheld: bool) -> Intent {
    let deny = profile.network == Network::Deny;
    let landlock = abi >= 1 && (has_fs_rules(profile) || deny || withheld);
    Intent {
        landlock,
        tcp: landlock && deny && abi >= 4,
        abstract_sockets: landlock && deny && abi >= 6,
        signals: landlock && abi >= 6,
        seccomp: deny && filter,
    }
}

/// One command's confinement: the report, what the child applies, and what the parent cleans up.
pub struct Plan {
    pub report: Enforcement,
    child: ChildSteps,
    cgroup: Option<PidsCgroup>,
    idle_cgroups: Arc<IdleCgroups>,
}

impl Plan {
    pub fn into_parts(self) -> (Enforcement, ChildSteps, Cleanup) {
        (self.report, self.child, Cleanup { cgroup: self.cgroup, idle_cgroups: self.idle_cgroups })
    }
}

/// What remains to undo once the command ended.
pub struct Cleanup {
    /// Removed on drop, unless [`Cleanup::finish`] keeps it for another command.
    cgroup: Option<PidsCgroup>,
    idle_cgroups: Arc<IdleCgroups>,
}

impl Cleanup {
    /// The command's pids cgroup directory, when it has one: the kill ladder ends the command
    /// through it ([`crate::exec::tree::end_cgroups`]).
    pub fn cgroup(&self) -> Option<&Path> {
        self.cgroup.as_ref().map(|cgroup| cgroup.dir.as_path())
    }

    /// Processes still in the command's pids cgroup (`None` without one).
    pub fn processes_left(&self) -> Option<u32> {
        let procs = crate::exec::tree::cgroup_procs(self.cgroup()?).ok()?;
        Some(u32::try_from(procs.len()).unwrap_or(u32::MAX))
    }

    /// What [`Cleanup::processes_left`] would say, when it can be known without looking up a path
    /// or waiting: `Some(None)` without a cgroup, `Some(Some(0))` when its `pids.current` (read
    /// through a descriptor it holds) is 0. `None`: ask [`Cleanup::processes_left`], off the runtime
    /// (tasks are counted, or zombies not reaped yet).
    pub fn left_now(&self) -> Option<Option<u32>> {
        match &self.cgroup {
            None => Some(None),
            Some(cgroup) => (cgroup.tasks().ok()? == 0).then_some(Some(0)),
        }
    }

    /// The kill ladder ended the command through its cgroup, setting `pids.max` to 0 by its path:
    /// the next command to use the cgroup sets its limit again.
    pub fn killed(&mut self) {
        if let Some(cgroup) = &mut self.cgroup {
            cgroup.limit = None;
        }
    }

    /// Done with the command's cgroup (its tree is gone by now): kept for another command when
    /// `left` (from [`Cleanup::processes_left`]) says it is empty, else removed (which fails,
    /// harmlessly, while a stray lives in it; shutdown sweeps what is left). Only agentd can put a
    /// process into an idle cgroup: confined commands cannot write to the cgroup tree.
    pub fn finish(self, left: Option<u32>) {
        drop(self.keep(left));
    }

    /// Keeps the command's cgroup for another command when `left` says it is empty and there is
    /// room. What is left to remove comes back (removing is path work: drop it off the runtime).
    pub fn keep(mut self, left: Option<u32>) -> Option<Self> {
        if left != Some(0) || self.cgroup.is_none() {
            return self.cgroup.is_some().then_some(self);
        }
        let cgroup = self.cgroup.take()?;
        self.cgroup = self.idle_cgroups.keep(cgroup);
        self.cgroup.is_some().then_some(self)
    }
}

/// What the child applies to itself between `clone` and `exec`; prepared by the parent.
///
/// The child shares the parent's memory until it execs (`clone(CLONE_VM)`, see
/// [`crate::exec::spawn::Spawner::spawn`]), so [`ChildSteps::enter`] takes `&self`: whatever the child
/// changed here, the parent would see as its own. The parent keeps it unchanged until the child
/// exec'd or exited.
pub struct ChildSteps {
    /// The landlock ruleset's descriptor (`Some(None)`: asked, but landlock is not there).
    ruleset: Option<Option<OwnedFd>>,
    filter: Option<Arc<BpfProgram>>,
    /// Refuse to exec on anything less than asked.
    strict: bool,
    /// `(RLIMIT_*, soft, hard)`.
    rlimits: Vec<(libc::__rlimit_resource_t, u64, u64)>,
    /// A duplicate of the command's cgroup join file ([`PidsCgroup::join`]).
    cgroup_join: Option<OwnedFd>,
}

/// What the child measured, written by the child into the parent's memory (they share it until the
/// exec) and read by the parent once the child exec'd or exited. All zeros: nothing was written.
#[derive(Debug, Default)]
pub struct ChildStatus {
    bytes: [u8; STATUS_LEN],
}

impl ChildSteps {
    fn expect(&self) -> Expect {
        Expect { landlock: self.ruleset.is_some(), seccomp: self.filter.is_some() }
    }

    /// Runs in the child: raw system calls only ([`crate::exec::syscall`]: the child runs beside
    /// agentd's thread, on its `errno`), nothing allocated, nothing of `self` changed. What landlock
    /// and seccomp gave goes to `status`; a strict profile that got less fails with `EPERM`.
    ///
    /// A `landlock_restrict_self` that succeeds enforces all of the ruleset ([`Applied`]).
    pub fn enter(&self, status: &mut ChildStatus) -> Result<(), i32> {
        use crate::exec::syscall;
        if let Some(join) = &self.cgroup_join {
            join_cgroup(join)?;
        }
        for &(resource, soft, hard) in &self.rlimits {
            syscall::set_rlimit(resource, soft, hard)?;
        }
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
        let measured = Measured { landlock, no_new_privs, seccomp };
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
        spawned: io::Result<u32>,
        report: &mut Enforcement,
    ) -> io::Result<u32> {
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

/// What the child asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Expect {
    landlock: bool,
    seccomp: bool,
}

/// What the child got, measured after landlock and seccomp were applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Measured {
    landlock: Applied,
    no_new_privs: bool,
    seccomp: bool,
}

/// What `landlock_restrict_self` gave. Nothing partial: the ruleset asks exactly what this kernel
/// offers ([`build_ruleset`]), so a ruleset in force is in force in full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Applied {
    NotAsked = 1,
    Failed,
    NotEnforced,
    Full,
}

const STATUS_LEN: usize = 4;

impl Measured {
    fn encode(self) -> [u8; STATUS_LEN] {
        [b'S', self.landlock as u8, u8::from(self.no_new_privs), u8::from(self.seccomp)]
    }

    fn decode(bytes: [u8; STATUS_LEN]) -> Option<Self> {
        let landlock = match bytes[1] {
            1 => Applied::NotAsked,
            2 => Applied::Failed,
            3 => Applied::NotEnforced,
            4 => Applied::Full,
            _ => return None,
        };
        (bytes[0] == b'S' && bytes[2] <= 1 && bytes[3] <= 1).then_some(Self {
            landlock,
            no_new_privs: bytes[2] == 1,
            seccomp: bytes[3] == 1,
        })
    }

    /// Less than asked: what a strict profile refuses.
    fn short_of(self, expect: Expect) -> bool {
        (expect.landlock && self.landlock != Applied::Full)
            || (expect.seccomp && !self.seccomp)
            || !self.no_new_privs
    }
}

/// Corrects the planned report with what the child measured.
fn record(report: &mut Enforcement, expect: Expect, measured: Option<Measured>) {
    let Some(measured) = measured else {
        if expect.landlock || expect.seccomp {
            for level in [&mut report.filesystem, &mut report.network, &mut report.signals] {
                lower(level, Level::NotEnforced);
            }
            report.notes.push("the command did not report its confinement".to_owned());
            report.level = overall(report);
        }
        return;
    };
    if expect.landlock {
        match measured.landlock {
            Applied::Full => {}
            failed => {
                lower(&mut report.filesystem, Level::NotEnforced);
                lower(&mut report.signals, Level::NotEnforced);
                let network =
                    if expect.seccomp && measured.seccomp { Level::Partial } else { Level::NotEnforced };
                lower(&mut report.network, network);
                report.notes.push(if failed == Applied::Failed {
                    "landlock_restrict_self failed: no landlock rule is in force".to_owned()
                } else {
                    "landlock was not enforced".to_owned()
                });
            }
        }
    }
    if expect.seccomp && !measured.seccomp {
        let tcp_left = report.landlock_abi >= 4 && (!expect.landlock || measured.landlock == Applied::Full);
        lower(&mut report.network, if tcp_left { Level::Partial } else { Level::NotEnforced });
        report.notes.push(
            "the seccomp filter could not be installed: UDP, raw and Unix sockets stay open".to_owned(),
        );
    }
    if !measured.no_new_privs {
        for level in [&mut report.filesystem, &mut report.network, &mut report.signals] {
            lower(level, Level::Partial);
        }
        report.notes.push("no_new_privs is not set".to_owned());
    }
    report.level = overall(report);
}

/// Moves the calling process (one thread: a child before its exec) into the cgroup whose join file
/// ([`PidsCgroup::join`]) is `join`. It writes `0`, which the kernel reads as "the writer": no pid to
/// format, whatever pid namespace agentd is in.
fn join_cgroup(join: &OwnedFd) -> Result<(), i32> {
    let written = crate::exec::syscall::write(join.as_raw_fd(), b"0")?;
    if written == 1 { Ok(()) } else { Err(libc::EIO) }
}

fn has_fs_rules(profile: &SandboxProfile) -> bool {
    profile.writable_roots.is_some() || profile.readable_roots.is_some()
}

/// The profile itself asks for landlock (what makes `strict` its default mode).
fn asks_for_landlock(profile: &SandboxProfile) -> bool {
    has_fs_rules(profile) || profile.network == Network::Deny
}

/// The landlock ruleset of one command. It asks exactly what this kernel offers (up to the rules'
/// ABI), so landlock reports "fully enforced" unless something failed; what an older ABI leaves
/// uncovered is the report's business ([`enforcement`]).
fn build_ruleset(
    profile: &SandboxProfile,
    want: &Intent,
    abi: u32,
    withheld: &[Withheld],
    seen: &mut Vec<carve::Seen>,
) -> Result<RulesetCreated, String> {
    let error = |e: landlock::RulesetError| e.to_string();
    let fs_abi = ABI::from(i32::try_from(abi).unwrap_or(i32::MAX)).min(RULES_ABI);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(fs_abi))
        .map_err(error)?;
    if want.tcp {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp).map_err(error)?;
    }
    let mut scopes = landlock::BitFlags::<Scope>::empty();
    if want.signals {
        scopes |= Scope::Signal;
    }
    if want.abstract_sockets {
        scopes |= Scope::AbstractUnixSocket;
    }
    if !scopes.is_empty() {
        ruleset = ruleset.scope(scopes).map_err(error)?;
    }
    let mut created = ruleset.create().map_err(error)?;
    let all = AccessFs::from_all(fs_abi);
    if has_fs_rules(profile) {
        let readable = profile.readable_roots.clone().unwrap_or_else(|| vec!["/".to_owned()]);
        for root in &readable {
            created = carve::add_root(
                created,
                Path::new(root),
                AccessFs::from_read(fs_abi),
                withheld,
                fs_abi,
                seen,
            )?;
        }
        // Writable roots default to nothing when only readable roots are given.
        for root in profile.writable_roots.iter().flatten() {
            created = carve::add_root(created, Path::new(root), all, withheld, fs_abi, seen)?;
        }
        // Every shell writes to /dev/null.
        created = carve::add_root(
            created,
            Path::new("/dev/null"),
            AccessFs::from_file(fs_abi),
            withheld,
            fs_abi,
            seen,
        )?;
    } else {
        // No filesystem rules: everything, less what is withheld.
        created = carve::add_root(created, Path::new("/"), all, withheld, fs_abi, seen)?;
    }
    Ok(created)
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

/// The directory agentd makes its per-command cgroups in, and the lock that tells other agentds it
/// is alive (see [`sweep_dead_agentds`]).
struct CgroupParent {
    dir: PathBuf,
    /// An exclusive `flock` on `dir`, held for agentd's whole life (the kernel drops it when agentd
    /// dies, however it dies). `None` where the lock could not be taken.
    _alive: Option<Flock<File>>,
}

/// Where agentd can create pids cgroups: beneath its own pids cgroup (so every limit on agentd
/// bounds its commands too; a cgroup at the hierarchy's root once gave a command more processes than
/// agentd itself was allowed), in a directory `agentd-<pid>` with one child per command. What dead
/// agentds left there is swept first.
fn pids_cgroup_parent() -> Option<CgroupParent> {
    let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let own = own_pids_cgroup(&membership, &mounts)?;
    let pid = std::process::id();
    sweep_dead_agentds(&own.dir, pid);
    let dir = own.dir.join(format!("agentd-{pid}"));
    if own.v2 {
        // v2: the controller must be enabled for our children and for theirs.
        std::fs::write(own.dir.join("cgroup.subtree_control"), "+pids").ok()?;
        std::fs::create_dir_all(&dir).ok()?;
        if std::fs::write(dir.join("cgroup.subtree_control"), "+pids").is_err() {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
    } else {
        std::fs::create_dir_all(&dir).ok()?;
    }
    let alive = lock_dir(&dir);
    Some(CgroupParent { dir, _alive: alive })
}

/// An exclusive `flock` on the directory `dir`, or `None` when another process holds one (or the
/// directory cannot be opened).
fn lock_dir(dir: &Path) -> Option<Flock<File>> {
    Flock::lock(File::open(dir).ok()?, FlockArg::LockExclusiveNonblock).ok()
}

/// The pid in a directory name `agentd-<pid>` of another agentd than `own`. Pure.
fn other_agentds_pid(name: &str, own: u32) -> Option<i32> {
    let pid: u32 = name.strip_prefix("agentd-")?.parse().ok()?;
    (pid != 0 && pid != own).then_some(i32::try_from(pid).ok()?)
}

/// Removes the `agentd-<pid>` directories in `parent` whose agentd died without removing them
/// (SIGKILL, a crash), with their empty per-command cgroups: without this they would pile up, one per
/// agentd ever killed. One is left alone while its pid is alive here (an agentd of an older version
/// holds no lock) or while anyone holds its lock (an agentd in another pid namespace), and a
/// cgroup that still holds a process cannot be removed (`rmdir` refuses it).
fn sweep_dead_agentds(parent: &Path, own: u32) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| other_agentds_pid(name, own)) else {
            continue;
        };
        let dead = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) == Err(Errno::ESRCH);
        let dir = entry.path();
        if dead && let Some(_held) = lock_dir(&dir) {
            tracing::debug!("removing {}, left by an agentd that is gone", dir.display());
            remove_cgroup_tree(&dir);
        }
    }
}

/// Removes `dir`'s per-command cgroups, then `dir`: each one that is empty (no process, no child).
fn remove_cgroup_tree(dir: &Path) {
    if let Ok(children) = std::fs::read_dir(dir) {
        for child in children.flatten() {
            if child.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = std::fs::remove_dir(child.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
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
        self.cgroups.get_or_init(pids_cgroup_parent).as_ref().map(|parent| &parent.dir)
    }

    /// The per-command cgroups that exist now (commands running, or a finished command's
    /// background processes still in its cgroup).
    pub fn command_cgroups(&self) -> Vec<PathBuf> {
        let Some(Some(parent)) = self.cgroups.get() else { return Vec::new() };
        std::fs::read_dir(&parent.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
            .map(|entry| entry.path())
            .collect()
    }

    /// Removes agentd's cgroups at shutdown, once every process is gone.
    pub fn remove_cgroups(&self) {
        let Some(Some(parent)) = self.cgroups.get() else { return };
        remove_cgroup_tree(&parent.dir);
    }
}

/// Empty per-command cgroups kept for the next commands. Making and removing a cgroup per command
/// cost more than everything else planned (in v1, the `rmdir` also waits for the kernel to take the
/// cgroup offline), so while commands run, as many are kept as ran at once, up to a bound that
/// leaves room for the rest of agentd's descriptors (each holds 3). Once agentd is idle, all but
/// [`IDLE_CGROUPS_KEPT`] are removed ([`Confiner::trim_idle_cgroups`]).
struct IdleCgroups {
    list: std::sync::Mutex<Vec<PidsCgroup>>,
    /// Kept at most while busy.
    busy: usize,
}

/// Idle cgroups kept for good.
const IDLE_CGROUPS_KEPT: usize = 8;

/// Idle cgroups kept at most while busy, whatever the descriptor limit.
const IDLE_CGROUPS_BUSY: usize = 256;

impl IdleCgroups {
    /// The bound while busy: a sixteenth of the descriptor limit (3 per cgroup, and the rest for
    /// connections and work), between the two constants.
    fn new() -> Self {
        let fds = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(1024, |(soft, _)| soft);
        let busy =
            usize::try_from(fds / 16).unwrap_or(usize::MAX).clamp(IDLE_CGROUPS_KEPT, IDLE_CGROUPS_BUSY);
        Self { list: Default::default(), busy }
    }

    fn list(&self) -> std::sync::MutexGuard<'_, Vec<PidsCgroup>> {
        self.list.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn take(&self) -> Option<PidsCgroup> {
        self.list().pop()
    }

    /// Keeps `cgroup` for another command; it comes back when there is no room (to be removed).
    fn keep(&self, cgroup: PidsCgroup) -> Option<PidsCgroup> {
        let mut list = self.list();
        if list.len() >= self.busy {
            return Some(cgroup);
        }
        list.push(cgroup);
        None
    }

    /// The idle cgroups beyond [`IDLE_CGROUPS_KEPT`], taken out (to be removed).
    fn trim(&self) -> Vec<PidsCgroup> {
        let mut list = self.list();
        let keep = list.len().min(IDLE_CGROUPS_KEPT);
        list.split_off(keep)
    }
}

/// One command's pids cgroup.
struct PidsCgroup {
    dir: PathBuf,
    /// The file the child writes `0` to, to move in, opened by the parent: `tasks` in cgroup v1,
    /// `cgroup.procs` in v2. In v1, `0` written to `tasks` moves only the writer's thread (the
    /// whole child, which has one), and the kernel then skips the lock that a move of a whole
    /// process takes (`cgroup_threadgroup_rwsem`): taking it after a quiet spell waits out an RCU
    /// grace period, 15–23 ms on this project's machine, against about 40 µs through `tasks`.
    join: OwnedFd,
    /// `pids.max`, open for the next command's limit.
    max: File,
    /// What agentd last wrote to `pids.max` through `max`; `None`: not known (the kill ladder
    /// writes 0 through the path). Nothing else writes it: commands cannot reach the cgroup tree.
    limit: Option<u64>,
    /// `pids.current`, open to tell an empty cgroup without a path lookup.
    current: File,
}

/// `tasks` where the cgroup has one that agentd may write (v1), else `cgroup.procs` (v2, or a
/// delegation that handed over `cgroup.procs` only).
fn open_join_file(dir: &Path) -> io::Result<OwnedFd> {
    let open = |name: &str| File::options().write(true).open(dir.join(name));
    Ok(open("tasks").or_else(|_| open("cgroup.procs"))?.into())
}

impl PidsCgroup {
    fn create(parent: &Path, seq: u64, max: u64) -> io::Result<Self> {
        let dir = parent.join(seq.to_string());
        std::fs::create_dir_all(&dir)?;
        let mut cgroup = Self {
            max: File::options().write(true).open(dir.join("pids.max"))?,
            limit: None,
            current: File::open(dir.join("pids.current"))?,
            join: open_join_file(&dir)?,
            dir,
        };
        cgroup.set_max(max)?;
        Ok(cgroup)
    }

    /// Tasks charged to it now (zombies not yet reaped included).
    fn tasks(&self) -> io::Result<u64> {
        use std::os::unix::fs::FileExt as _;
        let mut buf = [0u8; 24];
        // A cgroup file is generated anew by a read at offset 0.
        let read = self.current.read_at(&mut buf, 0)?;
        let text = std::str::from_utf8(&buf[..read]).map_err(io::Error::other)?;
        text.trim().parse().map_err(io::Error::other)
    }

    /// Sets `pids.max`, unless it already holds `max` (most commands of a profile share their
    /// limit, and the write is a system call on the runtime).
    fn set_max(&mut self, max: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt as _;
        if self.limit == Some(max) {
            return Ok(());
        }
        self.limit = None;
        let text = max.to_string();
        // A cgroup file takes each write whole, wherever it is written.
        let written = self.max.write_at(text.as_bytes(), 0)?;
        if written != text.len() {
            return Err(io::ErrorKind::WriteZero.into());
        }
        self.limit = Some(max);
        Ok(())
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
    fn only_other_agentds_directories_are_swept() {
        assert_eq!(other_agentds_pid("agentd-4656", 7), Some(4656));
        for name in
            ["agentd-7", "agentd-0", "agentd-", "agentd-x1", "agentd--3", "agentd-99999999999", "docker"]
        {
            assert_eq!(other_agentds_pid(name, 7), None, "{name}");
        }
    }

    /// The join goes through `tasks` where there is one (v1), else through `cgroup.procs` (v2).
    #[test]
    fn the_child_joins_through_tasks_where_there_is_one() {
        let written = |names: &[&str]| {
            let dir = tempfile::tempdir().unwrap();
            for name in names {
                std::fs::write(dir.path().join(name), "").unwrap();
            }
            join_cgroup(&open_join_file(dir.path()).unwrap()).unwrap();
            names
                .iter()
                .map(|name| std::fs::read_to_string(dir.path().join(name)).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(written(&["tasks", "cgroup.procs"]), ["0", ""]);
        assert_eq!(written(&["cgroup.procs"]), ["0"]);
    }

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
