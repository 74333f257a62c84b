//! The enforcement report, pure: what a profile gets on a machine, rule by rule, with the reasons for
//! anything less than full ([`enforcement`]), and the correction with what the command's own process
//! measured before its exec ([`record`]).

use agentd_protocol::permission::{Operation, PermissionMode};
use agentd_protocol::profile::{Enforcement, Level, Limits, Mode, Network, RuleEnforcement, SandboxProfile};

use super::Withheld;
use super::measured::{Applied, Expect, Measured};
use super::permits::Programs;
use super::seccomp::Rules;

/// What the report depends on, besides the profile.
#[derive(Debug, Clone, Copy)]
pub(super) struct Machine {
    /// The kernel's landlock ABI.
    pub(super) abi: u32,
    /// The seccomp filter of `network = "deny"` exists for this build and kernel.
    pub(super) seccomp: bool,
    /// `limits.processes` binds: a pids cgroup can be made, or RLIMIT_NPROC binds (not uid 0).
    pub(super) processes_contained: bool,
    /// What the profile's `user` gets here ([`super::identity::decide`]; its notes are added by the
    /// caller).
    pub(super) privileges: Level,
}

/// What `profile` gets on `machine`, rule by rule, with the reasons for anything less than full.
pub(super) fn enforcement(profile: &SandboxProfile, machine: &Machine, withheld: &[Withheld]) -> Enforcement {
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
        programs: Level::NotRequested,
        permissions: Vec::new(),
        limits,
        privileges: machine.privileges,
        notes,
    };
    report.level = overall(&report);
    report
}

/// What `allowed_commands` rests on here besides landlock's execute rights.
#[derive(Debug, Clone, Copy)]
pub(super) struct ExecWalls {
    /// The seccomp filter that refuses unsealed memfds exists for this build and kernel.
    pub(super) memfd_filter: bool,
    /// Commands keep root's capabilities (`user = "agentd"` of a root agentd).
    pub(super) capabilities: bool,
}

/// Adds what the kernel makes of `permissions` and `allowed_commands`: `short[i]`, why rule `i`
/// is covered less than its text says (from the plan, [`super::permits`]); `programs`, the files
/// given the execute right (`None`: not resolved, e.g. in `hello`); `apart`, commands run as a
/// user of their own, so what a deny rule names keeps its owner ([`super::lease`]); `walls`, what
/// `allowed_commands` rests on besides landlock.
pub(super) fn add_rules(
    report: &mut Enforcement,
    profile: &SandboxProfile,
    short: &[Vec<String>],
    programs: Option<&Programs>,
    apart: bool,
    walls: ExecWalls,
) {
    let abi = report.landlock_abi;
    report.permissions = profile
        .permissions
        .iter()
        .enumerate()
        .map(|(i, rule)| {
            let mut notes = short.get(i).cloned().unwrap_or_default();
            let writes = rule.applies_to(Operation::Write);
            let level = if abi == 0 {
                notes.push(
                    "no landlock: agentd's file verbs check it, commands are not held to it".to_owned(),
                );
                Level::NotEnforced
            } else if !notes.is_empty() {
                Level::Partial
            } else if writes && abi < 3 {
                notes.push(format!("truncate(2) is refused only from landlock ABI 3, the kernel has {abi}"));
                Level::Partial
            } else {
                Level::Full
            };
            if abi > 0 && writes && rule.mode == PermissionMode::Deny {
                notes.push(
                    "landlock grants a directory's rights to everything beneath it, so the directories \
                     between a writable root and these paths cannot get new entries or lose old ones either"
                        .to_owned(),
                );
            } else if abi > 0 && rule.mode == PermissionMode::Deny && rule.applies_to(Operation::Read) {
                notes.push(
                    "so that no command renames these paths (or a directory on their way) to a name the next \
                     command could read, nothing is removed, renamed or moved in or out of the directories \
                     between a writable root and these paths, and nothing is moved or linked out of these \
                     paths; new entries can be made there"
                        .to_owned(),
                );
            }
            if rule.mode == PermissionMode::Deny {
                // Landlock has no right for chmod, utime or chown: ownership is the wall.
                if !apart {
                    notes.push(
                        "commands run as agentd's own user, who owns these paths: their mode, times and \
                         owner are not kept from commands"
                            .to_owned(),
                    );
                } else if !short.get(i).is_none_or(Vec::is_empty) {
                    notes.push(
                        "what a command makes that the kernel does not cover is the sandbox user's: its \
                         mode, times and owner too (agentd keeps its owner only on what the rule named \
                         when agentd started)"
                            .to_owned(),
                    );
                }
            }
            RuleEnforcement { rule: rule.to_string(), level, notes }
        })
        .collect();
    if let Some(allowed) = &profile.allowed_commands {
        report.programs = if abi == 0 {
            report.notes.push(
                "allowed_commands: needs landlock; only the first word of each command is checked".to_owned(),
            );
            Level::NotEnforced
        } else {
            let mut level = Level::Full;
            if let Some(programs) = programs {
                program_notes(&mut report.notes, programs);
                if !programs.multi_call.is_empty() {
                    level = Level::Partial;
                }
            }
            if !walls.memfd_filter {
                report.notes.push(format!("allowed_commands: {NO_MEMFD_SEAL}"));
                level = Level::Partial;
            }
            if walls.capabilities {
                report.notes.push(
                    "allowed_commands: commands keep root's capabilities (user = \"agentd\"), and with \
                     CAP_SYS_ADMIN one can execute shared memory it wrote, through /proc/self/map_files: \
                     landlock does not cover those files"
                        .to_owned(),
                );
                level = Level::Partial;
            }
            report.notes.push(format!(
                "allowed_commands ({}): an allowed interpreter runs whatever its language can, and the \
                 dynamic loader, which every dynamic program needs, loads any program it is handed \
                 (`ld.so /usr/bin/curl`)",
                allowed.join(", ")
            ));
            level
        };
    }
    report.level = overall(report);
}

/// What commands can do when no seccomp filter refuses unsealed memfds.
const NO_MEMFD_SEAL: &str = "memfd_create is not refused (no seccomp filter), so a command can execute a \
     program it writes into memory (`execveat` of a memfd): landlock does not cover those files";

/// Names of a multi-call program shown in a note; the rest are counted.
const NAMES_SHOWN: usize = 12;

/// What the report says of the programs resolved for `allowed_commands`.
fn program_notes(notes: &mut Vec<String>, programs: &Programs) {
    for name in &programs.missing {
        notes.push(format!("allowed_commands: `{name}` was not found on PATH: it cannot run"));
    }
    for (name, step) in &programs.changeable {
        notes.push(format!(
            "allowed_commands: `{name}` is not granted: it resolves through {}, which commands can change, \
             so it cannot run",
            step.display()
        ));
    }
    for (file, names) in &programs.multi_call {
        let mut shown = names.iter().take(NAMES_SHOWN).cloned().collect::<Vec<_>>().join(", ");
        if names.len() > NAMES_SHOWN {
            shown.push_str(&format!(" and {} more", names.len() - NAMES_SHOWN));
        }
        notes.push(format!(
            "allowed_commands: {} is a multi-call program: granted, it also runs as {shown}",
            file.display()
        ));
    }
    let shown = |files: &[std::path::PathBuf]| {
        files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ")
    };
    notes.push(format!(
        "allowed_commands: executable: {}; interpreters: {}",
        shown(&programs.files),
        shown(&programs.interpreters)
    ));
}

/// The notes that say why something is less than full.
pub(super) fn reasons(report: &Enforcement) -> String {
    let mut reasons: Vec<String> =
        report.notes.iter().filter(|n| !n.starts_with("withheld:")).cloned().collect();
    for rule in report.permissions.iter().filter(|r| r.level != Level::Full) {
        reasons.extend(rule.notes.iter().map(|note| format!("permission {}: {note}", rule.rule)));
    }
    reasons.join("; ")
}

/// The weakest level among the rules asked for.
pub(super) fn overall(report: &Enforcement) -> Level {
    [report.filesystem, report.network, report.signals, report.limits, report.privileges, report.programs]
        .into_iter()
        .chain(report.permissions.iter().map(|rule| rule.level))
        .filter(|l| *l != Level::NotRequested)
        .min()
        .unwrap_or(Level::NotRequested)
}

/// Lowers a rule that was asked for to at most `to`.
pub(super) fn lower(level: &mut Level, to: Level) {
    if *level != Level::NotRequested && *level > to {
        *level = to;
    }
}

/// Lowers what landlock enforces of `permissions` and `allowed_commands`.
fn lower_rules(report: &mut Enforcement, to: Level) {
    lower(&mut report.programs, to);
    for rule in &mut report.permissions {
        lower(&mut rule.level, to);
    }
}

/// What the child asks of landlock and seccomp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Intent {
    /// A landlock domain (filesystem rules: the profile's, or "everything" less what is withheld).
    pub(super) landlock: bool,
    pub(super) tcp: bool,
    pub(super) abstract_sockets: bool,
    pub(super) signals: bool,
    pub(super) seccomp: bool,
}

pub(super) fn intent(profile: &SandboxProfile, abi: u32, filter: bool, withheld: bool) -> Intent {
    let deny = profile.network == Network::Deny;
    let rules = filter_rules(profile);
    let landlock = abi >= 1 && (has_fs_rules(profile) || deny || withheld || super::permits::wanted(profile));
    Intent {
        landlock,
        tcp: landlock && deny && abi >= 4,
        // Whatever the network rule: an abstract socket is a way out of the sandbox that needs no
        // path (a session bus, another agentd's helper), and no command needs another's.
        abstract_sockets: landlock && abi >= 6,
        signals: landlock && abi >= 6,
        seccomp: (rules.network || rules.memfd) && filter,
    }
}

/// What the seccomp filter of `profile`'s commands refuses.
pub(super) fn filter_rules(profile: &SandboxProfile) -> Rules {
    Rules { network: profile.network == Network::Deny, memfd: profile.allowed_commands.is_some() }
}

/// Corrects the planned report with what the child measured.
pub(super) fn record(report: &mut Enforcement, expect: Expect, measured: Option<Measured>) {
    let Some(measured) = measured else {
        if expect.landlock || expect.seccomp || expect.privileges {
            for level in
                [&mut report.filesystem, &mut report.network, &mut report.signals, &mut report.privileges]
            {
                lower(level, Level::NotEnforced);
            }
            lower_rules(report, Level::NotEnforced);
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
                lower_rules(report, Level::NotEnforced);
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
        if report.network != Level::NotRequested {
            let tcp_left =
                report.landlock_abi >= 4 && (!expect.landlock || measured.landlock == Applied::Full);
            lower(&mut report.network, if tcp_left { Level::Partial } else { Level::NotEnforced });
            report.notes.push(
                "the seccomp filter could not be installed: UDP, raw and Unix sockets stay open".to_owned(),
            );
        }
        if report.programs != Level::NotRequested {
            lower(&mut report.programs, Level::Partial);
            report.notes.push(format!("the seccomp filter could not be installed: {NO_MEMFD_SEAL}"));
        }
    }
    if expect.privileges && !measured.privileges {
        lower(&mut report.privileges, Level::NotEnforced);
        report.notes.push("the command could not drop its privileges: it runs as agentd's user".to_owned());
    }
    if !measured.no_new_privs {
        for level in
            [&mut report.filesystem, &mut report.network, &mut report.signals, &mut report.privileges]
        {
            lower(level, Level::Partial);
        }
        lower_rules(report, Level::Partial);
        report.notes.push("no_new_privs is not set".to_owned());
    }
    report.level = overall(report);
}

pub(super) fn has_fs_rules(profile: &SandboxProfile) -> bool {
    profile.writable_roots.is_some() || profile.readable_roots.is_some()
}

/// The profile itself asks for landlock (what makes `strict` its default mode).
pub(super) fn asks_for_landlock(profile: &SandboxProfile) -> bool {
    has_fs_rules(profile) || profile.network == Network::Deny || super::permits::wanted(profile)
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;
