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
//! 5. the seccomp filter of `network = "deny"` and `allowed_commands` ([`seccomp`]) last, so no
//!    step above meets it;
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
//!
//! Modules:
//! - this one: [`Confiner`] (the server's profile, what the machine offers, the plans and what they
//!   keep for the next), [`Plan`] and [`Cleanup`];
//! - [`report`]: the enforcement report, pure rules over the profile and the machine;
//! - [`child`]: the child's steps; [`measured`]: what it asked for and measured, as it tells the
//!   parent;
//! - [`ruleset`]: the landlock ruleset and the kernel's ABI; [`carve`]: the withheld paths;
//!   [`permits`]: the profile's `permissions` and `allowed_commands` as landlock rules;
//!   [`watch`]: knowing a cached ruleset is still right; [`seccomp`]: the filter of `network =
//!   "deny"` and `allowed_commands`;
//! - [`cgroup`]: the per-command pids cgroups' lifecycle and the commands' task budget;
//! - [`identity`]: who a command (and the file work) becomes, the profile's `user`; [`lease`]: the
//!   writable roots lent to that user;
//! - [`files`]: the threads that do the sandbox's file work behind the profile's walls.

mod carve;
mod cgroup;
mod child;
mod files;
mod identity;
mod lease;
mod measured;
mod permits;
mod report;
mod ruleset;
mod seccomp;
mod watch;

pub use carve::{Withheld, agentd_withheld};
pub use cgroup::cgroup_procs;
pub use child::{ChildStatus, ChildSteps};
pub use files::{FileWork, FileWorkers};

use std::io;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentd_protocol::profile::{Enforcement, Level, Mode, SandboxProfile};
use landlock::RulesetCreated;
use thiserror::Error;

use crate::admission::ServerProfile;
use crate::permission::Permissions;
use cgroup::{CgroupParent, IdleCgroups, PidsCgroup};
use report::{Intent, Machine, enforcement, intent, lower, overall, reasons};
use ruleset::{build_ruleset, kernel_landlock_abi};

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
    #[error(transparent)]
    Lease(#[from] lease::record::LeaseError),
}

/// The server's profile and what this machine offers to enforce it.
pub struct Confiner {
    profile: SandboxProfile,
    /// Names the per-command cgroups.
    next_plan: std::sync::atomic::AtomicU64,
    abi: u32,
    /// The seccomp programs of `network = "deny"` and `allowed_commands`, built once; `None` where
    /// this build or kernel has no seccomp filter.
    filters: Option<seccomp::Filters>,
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
    /// What the profile's `user` gets here (every request shares the server's).
    user: identity::Decision,
    /// agentd's IPC namespace for its commands, made on first need (`None`: it could not be).
    ipc: std::sync::OnceLock<Option<OwnedFd>>,
    /// agentd's `PATH` less what the sandbox user cannot search, when commands become one.
    sandbox_path: Option<String>,
    /// The note naming the directories of agentd's `PATH` that commands cannot search, when some
    /// exist and the profile sets no `PATH` of its own.
    unreachable_path: Option<String>,
    /// Notes on writable roots the sandbox user cannot reach ([`Confiner::lend_roots`]).
    unreachable_roots: std::sync::OnceLock<Vec<String>>,
    /// What the server profile's `permissions` and `allowed_commands` came to when agentd started
    /// (for `hello`, and what the roots' lend leaves with its owner; looked at once, as it walks the
    /// tree for pattern rules; each command's own report looks again).
    rules_at_start: (permits::PermitPlan, Option<permits::Programs>),
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
        let profile_user = profile.user;
        let user = identity::decide(profile_user, &identity::Facts::read());
        let searchable = user.switch.and_then(|(uid, gid)| {
            std::env::var("PATH").ok().map(|path| (uid, identity::searchable_path(&path, uid, gid)))
        });
        let unreachable_path = searchable
            .as_ref()
            .filter(|(_, path)| !path.unreachable.is_empty() && !profile.env.contains_key("PATH"))
            .map(|(uid, path)| {
                format!(
                    "PATH: {} not searchable by the sandbox user (uid {uid}), so commands cannot run \
                     the programs there; install them where that user can reach them (/usr/local/bin, \
                     /opt), or make the directories on the way searchable (chmod o+x)",
                    path.unreachable.join(", ")
                )
            });
        let sandbox_path = searchable.map(|(_, path)| path.path);
        let filters = if seccomp::kernel_has_seccomp() {
            match seccomp::Filters::build() {
                Ok(filters) => Some(filters),
                Err(err) => {
                    tracing::warn!(
                        "network = \"deny\" and allowed_commands will lack their seccomp filter: {err}"
                    );
                    None
                }
            }
        } else {
            None
        };
        let plan = Permissions::new(&profile.permissions)
            .map(|rules| permits::plan_permissions(&rules))
            .unwrap_or_default();
        let writer = writer(&user);
        let programs = profile.allowed_commands.as_deref().map(|allowed| {
            permits::resolve_programs(
                allowed,
                &permits::command_path(&profile, sandbox_path.as_deref()),
                &permits::Writable::of(&profile, writer),
            )
        });
        Self {
            rules_at_start: (plan, programs),
            profile,
            next_plan: Default::default(),
            abi: kernel_landlock_abi(),
            filters,
            withheld,
            rulesets: Default::default(),
            watch: watch::Watch::new(),
            link_notes: Default::default(),
            cgroups: Default::default(),
            idle_cgroups: Arc::new(IdleCgroups::new()),
            root: nix::unistd::geteuid().is_root(),
            user,
            sandbox_path,
            unreachable_path,
            unreachable_roots: std::sync::OnceLock::new(),
            ipc: std::sync::OnceLock::new(),
        }
    }

    /// Commands run as agentd's own user (no user switch here): agentd's files are theirs to read
    /// unless landlock withholds them.
    pub fn commands_are_agentds_user(&self) -> bool {
        let euid = nix::unistd::geteuid().as_raw();
        self.user.switch.is_none_or(|(uid, _)| uid == euid)
    }

    /// Keeps `withheld` from every command too (before the first command and the file workers).
    pub fn withhold(&mut self, withheld: Withheld) {
        self.withheld.push(withheld);
    }

    /// Removes the idle cgroups kept beyond the few kept for good ([`IdleCgroups::trim`]), once no
    /// request came for a while ([`crate::memory::release_when_idle`]). Path work: off the runtime.
    pub fn trim_idle_cgroups(&self) {
        drop(self.idle_cgroups.trim());
    }

    /// Looks at the cgroups finished commands left processes in: removes those that are empty
    /// again, and returns those whose processes met their limit since (a fork bomb that outlived
    /// its exec), to be ended ([`crate::exec::tree::end_cgroups`]). Path work: off the runtime.
    pub fn watch_left_behind(&self) -> Vec<PathBuf> {
        self.idle_cgroups.watch_left_behind()
    }

    /// Whether finished commands left processes in cgroups: a look at a list, for the runtime.
    pub fn left_behind(&self) -> bool {
        self.idle_cgroups.has_left_behind()
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
        let cgroups = self.cgroups_ready(build)?;
        let want = intent(profile, self.abi, self.filters.is_some(), !self.withheld.is_empty());
        let prepare = |message: String| ConfineError::Prepare { profile: profile.name.clone(), message };
        let built = match (want.landlock, now) {
            (false, _) => None,
            (true, None) => match self.ruleset(profile, want) {
                Ok(built) => Some(built),
                Err(err) => return Some(Err(prepare(err))),
            },
            (true, Some(now)) => Some(self.ruleset_ready(profile, want, now?)?),
        };
        let mut report = self.report_with(profile, links, cgroups.is_some());
        let (ruleset, short, programs) = match built {
            Some(Built { ruleset, short, programs }) => (Some(ruleset), short, programs),
            None => (None, Vec::new(), None),
        };
        let apart = self.user.switch.is_some();
        report::add_rules(&mut report, profile, &short, programs.as_ref(), apart, self.exec_walls());
        let strict = report.mode == Mode::Strict;
        if strict && report.level != Level::Full && report.level != Level::NotRequested {
            return Some(Err(ConfineError::NotEnforceable {
                profile: profile.name.clone(),
                notes: reasons(&report),
            }));
        }
        let filter = if want.seccomp {
            self.filters.as_ref().and_then(|filters| filters.get(report::filter_rules(profile)))
        } else {
            None
        };
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
        let cgroup = match cgroups {
            Some(parent) => match self.command_cgroup(parent, profile.limits.processes, build)? {
                Ok(cgroup) => Some(cgroup),
                Err(err) => return Some(Err(prepare(err.to_string()))),
            },
            None => None,
        };
        // Without a cgroup, the per-user process limit is the fallback (it does not bind uid 0).
        if cgroup.is_none() {
            rlimits.extend(limits.processes.map(|v| (libc::RLIMIT_NPROC, v, v)));
        }
        let cgroup_join = cgroup.as_ref().map(|cgroup| Arc::clone(&cgroup.join));
        Some(Ok(Plan {
            report: Some(report),
            child: ChildSteps {
                confined: true,
                // A ruleset the crate made no descriptor for: landlock is not there.
                ruleset: ruleset.map(Option::<OwnedFd>::from),
                filter,
                strict,
                rlimits,
                cgroup_join,
                identity: self.identity(),
            },
            cgroup,
            idle_cgroups: Arc::clone(&self.idle_cgroups),
        }))
    }

    /// The plan of a command without a profile: nothing confines it, but it runs in a pids cgroup
    /// of its own with no limit of its own, beneath the commands' budget, so it and whatever it
    /// leaves running can neither starve agentd nor pile up across execs, and a fork bomb is ended
    /// whole. `Some(None)`: no cgroup can be had here (the command runs as before). `None` when
    /// `build` is false and something must be made first (call again with `build`, off the
    /// runtime).
    pub fn unconfined_plan(&self, build: bool) -> Option<Option<Plan>> {
        let Some(parent) = self.cgroups_ready(build)? else { return Some(None) };
        if self.idle_cgroups.crowded() {
            return Some(self.budget_plan());
        }
        let cgroup = match self.command_cgroup(parent, None, build)? {
            Ok(cgroup) => cgroup,
            Err(err) => {
                tracing::warn!("a command runs without a cgroup of its own: {err}");
                return Some(None);
            }
        };
        Some(Some(self.joining(Arc::clone(&cgroup.join), Some(cgroup))))
    }

    /// An unconfined command's plan: join the cgroup of `join` (its own `cgroup`, or the budget's),
    /// nothing else.
    fn joining(&self, join: Arc<OwnedFd>, cgroup: Option<PidsCgroup>) -> Plan {
        Plan {
            report: None,
            child: ChildSteps {
                confined: false,
                ruleset: None,
                filter: None,
                strict: false,
                rlimits: Vec::new(),
                cgroup_join: Some(join),
                identity: None,
            },
            cgroup,
            idle_cgroups: Arc::clone(&self.idle_cgroups),
        }
    }

    /// An unconfined command's plan when no cgroup of its own can be had ([`IdleCgroups::crowded`]):
    /// it joins the commands' budget itself. `None`: not even that.
    fn budget_plan(&self) -> Option<Plan> {
        let join = Arc::clone(self.cgroups.get()?.as_ref()?.join.as_ref()?);
        Some(self.joining(join, None))
    }

    /// Where per-command cgroups are made: `Some(None)` where they cannot be; `None` when not
    /// `build` and it is not known yet (finding agentd's own cgroup is path work).
    fn cgroups_ready(&self, build: bool) -> Option<Option<&Path>> {
        if build {
            return Some(self.cgroup_parent().map(PathBuf::as_path));
        }
        Some(self.cgroups.get()?.as_ref().map(|parent| parent.dir.as_path()))
    }

    /// A cgroup for one command allowed `max` tasks (`None`: the budget only). Not `build`: only an
    /// idle one will do, taken without a path lookup (`None` when there is none, or when its limit
    /// could not be set: it goes back, and `build` meets the error off the runtime).
    fn command_cgroup(&self, parent: &Path, max: Option<u64>, build: bool) -> Option<io::Result<PidsCgroup>> {
        let max = max.unwrap_or(cgroup::NO_LIMIT);
        if build {
            let seq = self.next_plan.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Some(self.pids_cgroup(parent, seq, max));
        }
        match self.idle_cgroup(max) {
            Ok(idle) => Some(Ok(idle?)),
            Err((cgroup, _)) => {
                // Given back: removing it is path work.
                drop(self.idle_cgroups.keep(cgroup));
                None
            }
        }
    }

    /// An idle per-command cgroup taken for a command allowed `max` tasks (writes and reads of
    /// files it holds open, no path looked up; the list's lock is only ever held to push or pop);
    /// `None` when there is none. One that cannot be taken comes back with the error, still to be
    /// removed.
    fn idle_cgroup(&self, max: u64) -> Result<Option<PidsCgroup>, (PidsCgroup, io::Error)> {
        match self.idle_cgroups.take() {
            None => Ok(None),
            Some(mut cgroup) => match cgroup.took(max) {
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
    fn ruleset(&self, profile: &SandboxProfile, want: Intent) -> Result<Built, String> {
        let mut cache = self.rulesets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let found = cache.iter().position(|c| c.key.is(profile, want));
        let at = match found {
            Some(at)
                if !cache[at].volatile
                    && (self.fresh(cache[at].watched) || carve::unchanged(&cache[at].seen)) =>
            {
                at
            }
            found => {
                if let Some(at) = found {
                    cache.remove(at);
                }
                let mut seen = Vec::new();
                let permissions = Permissions::new(&profile.permissions)?;
                let permits = permits::plan_permissions(&permissions);
                let programs = profile.allowed_commands.as_deref().map(|allowed| {
                    permits::resolve_programs(
                        allowed,
                        &permits::command_path(profile, self.sandbox_path()),
                        &permits::Writable::of(profile, writer(&self.user)),
                    )
                });
                let ruleset = build_ruleset(
                    profile,
                    &want,
                    self.abi,
                    &self.withheld,
                    &permits,
                    programs.as_ref(),
                    &mut seen,
                )?;
                if cache.len() >= CACHED_RULESETS {
                    cache.remove(0);
                }
                let key = RulesetKey {
                    writable_roots: profile.writable_roots.clone(),
                    readable_roots: profile.readable_roots.clone(),
                    permissions: profile.permissions.clone(),
                    allowed_commands: profile.allowed_commands.clone(),
                    want,
                };
                cache.push(CachedRuleset {
                    key,
                    seen,
                    ruleset,
                    watched: None,
                    // A listed program not found yet is looked for again at the next command.
                    volatile: permits.volatile || programs.as_ref().is_some_and(|p| !p.missing.is_empty()),
                    short: permits.short,
                    programs,
                });
                cache.len() - 1
            }
        };
        let cached = &mut cache[at];
        if !cached.volatile && !self.fresh(cached.watched) {
            cached.watched = self.watch_ruleset(&cached.seen);
        }
        // A second descriptor of the same kernel ruleset; nothing adds rules to it any more.
        cached.built()
    }

    /// A copy of the cached ruleset for `profile`, if it is watched and nothing it was built from
    /// changed since (the watch is at generation `now`): no path looked up, no waiting for a lock.
    fn ruleset_ready(&self, profile: &SandboxProfile, want: Intent, now: u64) -> Option<Built> {
        let cache = self.rulesets.try_lock().ok()?;
        let cached = cache.iter().find(|c| c.key.is(profile, want))?;
        if cached.volatile || cached.watched != Some(now) {
            return None;
        }
        cached.built().ok()
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
        let mut report = self.report_with(profile, links, cgroups);
        // Said at start, not in every command's result: it is the machine's, not the command's.
        report.notes.extend(self.unreachable_path.iter().cloned());
        let (plan, programs) = &self.rules_at_start;
        let apart = self.user.switch.is_some();
        report::add_rules(&mut report, profile, &plan.short, programs.as_ref(), apart, self.exec_walls());
        report
    }

    /// What `allowed_commands` rests on here besides landlock.
    fn exec_walls(&self) -> report::ExecWalls {
        report::ExecWalls { memfd_filter: self.filters.is_some(), capabilities: writer(&self.user).is_none() }
    }

    /// The `PATH` commands get when the profile sets none: agentd's, less the directories the
    /// sandbox user cannot search (`None`: agentd's own).
    pub fn sandbox_path(&self) -> Option<&str> {
        self.sandbox_path.as_deref()
    }

    /// Says, once at start, which directories of agentd's `PATH` commands cannot search (the
    /// hello's report says it too, so `agentctl status` shows it): a tool installed there (a pyenv
    /// or nvm under root's home) would otherwise be missing for commands without a word.
    pub fn warn_unreachable_path(&self) {
        if let Some(note) = &self.unreachable_path {
            tracing::warn!("{note}");
        }
    }

    /// Lends `roots` (the workspace and writable roots) to the sandbox user, when commands run as
    /// one ([`lease`]); what it returns gives them back at shutdown. Refused when a root overlaps one
    /// a live agentd lent ([`lease::record`]). File system work: before serving, or off the runtime.
    pub fn lend_roots(&self, roots: Vec<PathBuf>) -> Result<Lent, ConfineError> {
        let Some(to) =
            self.user.switch.filter(|_| self.profile.user == agentd_protocol::profile::User::Sandbox)
        else {
            return Ok(Lent { roots: Vec::new(), back: None, shared: lease::Shared::new(), lease: None });
        };
        let agentd = (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw());
        let mut lend = lease::Handover { to, from: Some(agentd.0), sandbox_ids: true, spared: Vec::new() };
        // A root beneath a directory the sandbox user cannot search (root's home, pytest's 0700
        // temp dirs) is lent in vain: said once, in every report.
        let unreachable: Vec<String> = roots
            .iter()
            .filter(|root| root.parent().is_some_and(|parent| !identity::searchable(parent, to.0, to.1)))
            .map(|root| {
                format!(
                    "writable root {}: a directory above it is not searchable by the sandbox user (uid {}), \
                     so commands cannot reach it",
                    root.display(),
                    to.0
                )
            })
            .collect();
        for note in &unreachable {
            tracing::warn!("{note}");
        }
        let _ = self.unreachable_roots.set(unreachable);
        // Recorded before anything changes hands: what the walk would take or enter at the top.
        let recorded = roots
            .iter()
            .filter(|root| lease::lends_root(root, &lend))
            .filter_map(|root| {
                Some(lease::record::Root {
                    path: root.display().to_string(),
                    chain: lease::record::chain(root)?,
                })
            })
            .collect();
        let record = lease::record::Record { pid: std::process::id(), uid: to.0, roots: recorded };
        let (held, live) = lease::record::lease(Path::new(lease::record::DIR), &record)?;
        lend.spared = live;
        let denied = self.denied_paths();
        let mut shared = lease::Shared::new();
        for root in &roots {
            let direction = lease::Direction::Lend { denied: &denied, shared: &mut shared };
            let changed = lease::hand_over(root, &lend, direction);
            tracing::debug!("{} lent to uid {}: {changed} entries", root.display(), to.0);
        }
        let back = lease::Handover { to: agentd, from: Some(to.0), sandbox_ids: false, spared: Vec::new() };
        Ok(Lent { roots, back: Some(back), shared, lease: Some(held) })
    }

    /// What the profile's permission rules deny of a real path, as the kernel read them at start
    /// ([`permits::plan_permissions`]: a pattern covers what matched it then).
    fn denied_paths(&self) -> impl Fn(&Path) -> lease::Denied + use<> {
        use agentd_protocol::permission::Operation;
        let plan = &self.rules_at_start.0;
        let found = |operation: Operation| -> Vec<(PathBuf, bool)> {
            let denied =
                plan.denied.iter().filter(|(_, op)| *op == operation).map(|(p, _)| (p.clone(), false));
            let allowed =
                plan.allowed.iter().filter(|(_, op)| *op == operation).map(|(p, _)| (p.clone(), true));
            denied.chain(allowed).collect()
        };
        let (read, write) = (found(Operation::Read), found(Operation::Write));
        move |path: &Path| lease::Denied {
            read: !crate::permission::allowed_at(&read, path),
            write: !crate::permission::allowed_at(&write, path),
        }
    }

    /// Where file work for the sandbox runs: on [`FileWorkers`] that carry the server profile's
    /// user and landlock domain ([`files`]). Builds the ruleset: path work, at start.
    ///
    /// The domain leaves out `permissions` and `allowed_commands`: the verbs check the rules
    /// themselves, by their text, on the paths they opened ([`crate::permission`]), so a write
    /// beside a write-denied subtree works, which landlock's carve-out would refuse; file work
    /// runs no program.
    pub fn file_workers(&self) -> Result<FileWorkers, ConfineError> {
        let mut profile = self.profile.clone();
        profile.permissions.clear();
        profile.allowed_commands = None;
        let profile = &profile;
        let prepare = |message: String| ConfineError::Prepare { profile: profile.name.clone(), message };
        let want = intent(profile, self.abi, self.filters.is_some(), !self.withheld.is_empty());
        let ruleset = match want.landlock {
            true => Some(Option::<OwnedFd>::from(self.ruleset(profile, want).map_err(prepare)?.ruleset)),
            false => None,
        };
        let steps = files::ThreadSteps {
            identity: self.identity().map(identity::Identity::for_thread),
            ruleset,
            strict: self.capability().mode == Mode::Strict,
        };
        FileWorkers::start(steps).map_err(|err| prepare(format!("no thread for file work: {err}")))
    }

    /// Who commands become, with agentd's IPC namespace (made on the first call).
    fn identity(&self) -> Option<identity::Identity> {
        let ipc =
            self.ipc.get_or_init(|| if self.user.root_steps { identity::ipc_namespace() } else { None });
        identity::Identity::new(&self.user, ipc.as_ref().map(|fd| fd.as_raw_fd()))
    }

    /// The report, given the withheld files' link notes and whether pids cgroups can be made.
    fn report_with(&self, profile: &SandboxProfile, links: Vec<String>, cgroups: bool) -> Enforcement {
        // RLIMIT_NPROC binds any uid but 0.
        let unprivileged = !self.root || self.user.switch.is_some();
        let processes_contained = profile.limits.processes.is_none() || cgroups || unprivileged;
        let machine = Machine {
            abi: self.abi,
            seccomp: self.filters.is_some(),
            processes_contained,
            privileges: self.user.level,
        };
        let mut report = enforcement(profile, &machine, &self.withheld);
        report.notes.extend(self.user.notes.iter().cloned());
        report.notes.extend(self.unreachable_roots.get().into_iter().flatten().cloned());
        // A withheld file's other names are not withheld (links come and go).
        if !links.is_empty() {
            lower(&mut report.filesystem, Level::Partial);
            report.notes.extend(links);
            report.level = overall(&report);
        }
        report
    }
}

/// Who commands under `user` write as, where no writable root bounds them: the `(uid, gid)` the
/// file modes are checked for, `None` when its capabilities write everywhere (root under
/// `user = "agentd"`).
fn writer(user: &identity::Decision) -> Option<(u32, u32)> {
    let own = (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw());
    match user.switch {
        Some(ids) => Some(ids),
        None if own.0 == 0 && !user.drop => None,
        None => Some(own),
    }
}

/// Roots lent to the sandbox user ([`Confiner::lend_roots`]).
pub struct Lent {
    roots: Vec<PathBuf>,
    back: Option<lease::Handover>,
    /// Denied entries whose group was lent, with their group and mode before.
    shared: lease::Shared,
    /// The record that the roots are lent, held until they are given back.
    lease: Option<lease::record::Lease>,
}

impl Lent {
    /// Gives back to agentd's user what the sandbox user owns in the roots, and their group and
    /// mode to the denied entries it could read (agentd is shutting down); then ends the lease.
    pub fn give_back(self) {
        if let Some(back) = &self.back {
            for root in &self.roots {
                lease::hand_over(root, back, lease::Direction::Back { shared: &self.shared });
            }
        }
        drop(self.lease);
    }
}

/// How many rulesets are kept for reuse (one per distinct set of roots and network rules).
const CACHED_RULESETS: usize = 8;

/// What shapes a ruleset.
#[derive(Debug, PartialEq)]
struct RulesetKey {
    writable_roots: Option<Vec<String>>,
    readable_roots: Option<Vec<String>>,
    permissions: Vec<agentd_protocol::permission::PermissionRule>,
    allowed_commands: Option<Vec<String>>,
    want: Intent,
}

impl RulesetKey {
    fn is(&self, profile: &SandboxProfile, want: Intent) -> bool {
        self.writable_roots == profile.writable_roots
            && self.readable_roots == profile.readable_roots
            && self.permissions == profile.permissions
            && self.allowed_commands == profile.allowed_commands
            && self.want == want
    }
}

struct CachedRuleset {
    key: RulesetKey,
    seen: Vec<carve::Seen>,
    ruleset: RulesetCreated,
    /// The generation of [`Confiner::watch`] at which it was known unchanged; `None`: not watched.
    watched: Option<u64>,
    /// Built from a look through the tree (a permission glob that is not a plain prefix): right
    /// only for the command it was built for, never reused.
    volatile: bool,
    /// Per permission rule, why the kernel covers less of it ([`permits::PermitPlan::short`]).
    short: Vec<Vec<String>>,
    /// With `allowed_commands`: the files given the execute right.
    programs: Option<permits::Programs>,
}

impl CachedRuleset {
    fn built(&self) -> Result<Built, String> {
        Ok(Built {
            ruleset: self.ruleset.try_clone().map_err(|e| e.to_string())?,
            short: self.short.clone(),
            programs: self.programs.clone(),
        })
    }
}

/// A ruleset for one command, and what the report says of its permission rules and programs.
struct Built {
    ruleset: RulesetCreated,
    short: Vec<Vec<String>>,
    programs: Option<permits::Programs>,
}
/// One command's confinement: the report, what the child applies, and what the parent cleans up.
pub struct Plan {
    /// `None`: an unconfined command's plan ([`Confiner::unconfined_plan`]).
    pub report: Option<Enforcement>,
    child: ChildSteps,
    cgroup: Option<PidsCgroup>,
    idle_cgroups: Arc<IdleCgroups>,
}

impl Plan {
    pub fn into_parts(self) -> (Option<Enforcement>, ChildSteps, Cleanup) {
        (self.report, self.child, Cleanup { cgroup: self.cgroup, idle_cgroups: self.idle_cgroups })
    }
}

/// What remains to undo once the command ended.
pub struct Cleanup {
    /// Removed on drop (path work: drop it off the runtime), or once its processes are gone,
    /// unless [`Cleanup::finish`] keeps it for another command.
    cgroup: Option<PidsCgroup>,
    idle_cgroups: Arc<IdleCgroups>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(cgroup) = self.cgroup.take() {
            self.idle_cgroups.remove(cgroup);
        }
    }
}

impl Cleanup {
    /// The command's pids cgroup directory, when it has one: the kill ladder ends the command
    /// through it ([`crate::exec::tree::end_cgroups`]).
    pub fn cgroup(&self) -> Option<&Path> {
        self.cgroup.as_ref().map(|cgroup| cgroup.dir.as_path())
    }

    /// Forks refused in the command's cgroup since the command took it (0 without one, or when it
    /// cannot be read): a read through a descriptor it holds.
    pub fn refused_forks(&self) -> u64 {
        self.cgroup.as_ref().and_then(|cgroup| cgroup.refused_forks().ok()).unwrap_or(0)
    }

    /// Processes still in the command's pids cgroup (`None` without one).
    pub fn processes_left(&self) -> Option<u32> {
        let procs = cgroup_procs(self.cgroup()?).ok()?;
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
