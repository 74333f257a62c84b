//! Sandbox profiles: what a command may touch (`writable_roots`, `readable_roots`, `permissions`,
//! `network`), see (`env_allowlist`, `env`), run (`allowed_commands`) and use (`limits`, timeouts),
//! and the report of what agentd actually enforced.
//!
//! A profile is loaded by `agentd serve --profile FILE` (TOML, the same field names). A request may
//! carry a [`ProfileOverride`] that only tightens it; agentd refuses one that would loosen it.
//!
//! [`env`](mod@env): which of the harness's variables a sandbox the host starts passes to its commands.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::permission::PermissionRule;

pub mod env;

/// The rules for every command agentd runs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxProfile {
    /// Shown in reports and errors.
    pub name: String,
    /// What to do when a rule cannot be enforced. Default: `strict` when the profile asks for
    /// landlock (roots or `network = "deny"`), else `best_effort`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// Directories (and files) commands may write beneath; everything else is read-only.
    /// Absent: writes are not restricted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writable_roots: Option<Vec<String>>,
    /// Directories commands may read beneath (writable roots are readable too). Absent: everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readable_roots: Option<Vec<String>>,
    /// Path permissions, first match wins ([`PermissionRule`]): the file verbs check them, and
    /// landlock enforces them for every command. Within the roots above.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub permissions: Vec<PermissionRule>,
    /// TCP `bind`/`connect`.
    #[serde(default)]
    pub network: Network,
    /// Variables of agentd's environment a command inherits. Absent: all (the token never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_allowlist: Option<Vec<String>>,
    /// Variables every command gets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Seconds for commands that name no timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_timeout: Option<f64>,
    /// Largest timeout a request may ask for (and no "no limit").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_timeout: Option<f64>,
    /// Programs commands may run: the first word is checked, and landlock grants the execute right
    /// only to `/bin/sh`, the dynamic loader and these programs (names found on `PATH` when the
    /// command starts, or absolute paths; not one reached through a directory or link commands can
    /// change), so `sh -c 'curl …'` fails unless `curl` is listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_commands: Option<Vec<String>>,
    #[serde(default)]
    pub limits: Limits,
    /// Who commands run as. Default: `sandbox`, an unprivileged user without capabilities.
    #[serde(default, skip_serializing_if = "User::is_sandbox")]
    pub user: User,
    /// Landlock ABI the profile's rules need; above the kernel's, they count as partially enforced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landlock_abi: Option<u32>,
}

/// Resource limits of each command (`setrlimit`; core dumps are always off).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// CPU seconds (`RLIMIT_CPU`): SIGXCPU, then SIGKILL one second later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<u64>,
    /// Bytes of address space (`RLIMIT_AS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address_space: Option<u64>,
    /// Processes (a per-command pids cgroup where agentd can create one, else `RLIMIT_NPROC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u64>,
    /// Largest file a command may write, bytes (`RLIMIT_FSIZE`: SIGXFSZ).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_size: Option<u64>,
    /// Open file descriptors (`RLIMIT_NOFILE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_files: Option<u64>,
}

/// Who a profile's commands (and agentd's file verbs for them) run as. On the wire and in a profile
/// file: `"sandbox"`, `"agentd"`, or `"UID:GID"` (`"UID"`: the gid is the uid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum User {
    /// Unprivileged, without capabilities: when agentd runs as root, a uid and gid of this agentd's
    /// own ([`sandbox_id`]), with no supplementary groups, which the workspace and writable roots are
    /// lent to for agentd's life; otherwise agentd's own (unprivileged) user.
    #[default]
    Sandbox,
    /// agentd's own user, with its capabilities: root inside a container whose walls are the
    /// container's (e.g. for `apt-get`). Never the embedded default on a host.
    Agentd,
    /// This uid and gid (not 0), without capabilities or supplementary groups; agentd must be root.
    Id { uid: u32, gid: u32 },
}

/// The first uid (and gid) of the range sandbox users are taken from: far above the ranges of
/// login users, system users and the usual `/etc/subuid` blocks.
pub const SANDBOX_ID_BASE: u32 = 1_600_000_000;

/// How many ids the range holds: one per pid (Linux's `pid_max` is at most 2^22).
pub const SANDBOX_ID_COUNT: u32 = 1 << 22;

/// The uid and gid of the sandbox user of the agentd whose pid is `pid`.
pub fn sandbox_id(pid: u32) -> u32 {
    SANDBOX_ID_BASE + pid % SANDBOX_ID_COUNT
}

/// Whether `id` is in the range sandbox users are taken from.
pub fn is_sandbox_id(id: u32) -> bool {
    (SANDBOX_ID_BASE..SANDBOX_ID_BASE + SANDBOX_ID_COUNT).contains(&id)
}

impl User {
    pub fn is_sandbox(&self) -> bool {
        *self == Self::Sandbox
    }
}

impl std::fmt::Display for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sandbox => f.write_str("sandbox"),
            Self::Agentd => f.write_str("agentd"),
            Self::Id { uid, gid } => write!(f, "{uid}:{gid}"),
        }
    }
}

impl std::str::FromStr for User {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let id = |part: &str| {
            part.parse::<u32>().ok().filter(|id| *id != 0 && *id != u32::MAX).ok_or_else(|| {
                format!("`{part}` is not a uid or gid above 0 (use \"agentd\" for agentd's own)")
            })
        };
        match text {
            "sandbox" => Ok(Self::Sandbox),
            "agentd" => Ok(Self::Agentd),
            _ => {
                let (uid, gid) = text.split_once(':').unwrap_or((text, text));
                if uid.is_empty() || !uid.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(format!("user `{text}`: expected \"sandbox\", \"agentd\" or \"UID:GID\""));
                }
                Ok(Self::Id { uid: id(uid)?, gid: id(gid)? })
            }
        }
    }
}

impl Serialize for User {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for User {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Refuse to run a command whose rules cannot all be enforced (fail closed).
    Strict,
    /// Run it anyway and report what was enforced.
    BestEffort,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    #[default]
    Allow,
    Deny,
}

/// Per-request tightening of the server's profile. Every field may only be stricter.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileOverride {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writable_roots: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readable_roots: Option<Vec<String>>,
    /// Rules put before the profile's own: only `deny` rules (an `allow` placed first could
    /// loosen a later deny).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub permissions: Vec<PermissionRule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_allowlist: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_commands: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_timeout: Option<f64>,
}

/// How much of a rule is in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Nothing of it is enforced.
    NotEnforced,
    /// Some of it is enforced.
    Partial,
    /// All of it is enforced.
    Full,
    /// The profile does not ask for it.
    NotRequested,
}

/// What agentd enforced for one command (in `exec_result`: as the command's own process measured
/// it before exec), or can enforce (in `hello`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforcement {
    pub profile: String,
    pub mode: Mode,
    /// The weakest level among the rules the profile asks for.
    pub level: Level,
    /// The kernel's landlock ABI (0: none).
    pub landlock_abi: u32,
    /// `writable_roots` / `readable_roots` and the withheld paths (landlock filesystem rules; full
    /// from ABI 3, partial below: truncate is not covered).
    pub filesystem: Level,
    /// `network = "deny"`: no socket but Unix stream/seqpacket, no connect, no io_uring (seccomp),
    /// TCP bind/connect (landlock ABI ≥ 4), abstract Unix sockets (landlock ABI ≥ 6).
    pub network: Level,
    /// Signals scoped to the command's own sandbox (landlock ABI ≥ 6); asked for by filesystem
    /// rules or `network = "deny"`. Absent from older agentd: not requested.
    #[serde(default = "not_requested")]
    pub signals: Level,
    /// `allowed_commands`: the execute right granted only to the shell, the loader and the listed
    /// programs, each resolved through nothing commands can change (landlock), and no memfd that
    /// could be executed (seccomp); `partial` when a granted program is multi-call (busybox),
    /// without the seccomp filter, or when commands keep root's capabilities. Absent from older
    /// agentd: not requested.
    #[serde(default = "not_requested")]
    pub programs: Level,
    /// `permissions`, rule by rule in the order they apply (a request's rules first). Absent:
    /// none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub permissions: Vec<RuleEnforcement>,
    /// `limits` (rlimits, pids cgroup).
    pub limits: Level,
    /// `user`: the command runs as a user other than root, without capabilities (`full`), or not
    /// (`not_enforced`); `not_requested` for `user = "agentd"`. Absent from older agentd: not
    /// requested.
    #[serde(default = "not_requested")]
    pub privileges: Level,
    /// For a person: why something is less than full, and what agentd withholds from every command
    /// (its token file, the cgroup tree: one note starting `withheld:`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// What was enforced of one permission rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleEnforcement {
    /// The rule in its command-line form, e.g. `deny:write:/workspace/src/**`.
    pub rule: String,
    /// `full`: the kernel enforces all of it; `partial`: a glob that is not a plain prefix, resolved
    /// against the tree when the command started (files matching it that appear later are not
    /// covered), or a kernel without landlock's newer rights; `not_enforced`: no landlock (the
    /// file verbs still check it).
    pub level: Level,
    /// Why less than full, and what it costs commands.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

fn not_requested() -> Level {
    Level::NotRequested
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_order_from_weakest() {
        assert!(Level::NotEnforced < Level::Partial && Level::Partial < Level::Full);
    }

    #[test]
    fn a_report_without_the_newer_fields_still_parses() {
        let old = r#"{"profile":"p","mode":"strict","level":"full","landlock_abi":5,
            "filesystem":"full","network":"not_requested","limits":"not_requested"}"#;
        let report: Enforcement = serde_json::from_str(old).unwrap();
        assert_eq!(report.signals, Level::NotRequested);
        assert_eq!(report.privileges, Level::NotRequested);
    }

    #[test]
    fn users_read_and_write_as_their_names_or_ids() {
        for (text, user) in [
            ("sandbox", User::Sandbox),
            ("agentd", User::Agentd),
            ("1000:1000", User::Id { uid: 1000, gid: 1000 }),
            ("1000:50", User::Id { uid: 1000, gid: 50 }),
        ] {
            assert_eq!(text.parse::<User>(), Ok(user), "{text}");
            assert_eq!(user.to_string(), text);
        }
        assert_eq!("1000".parse::<User>(), Ok(User::Id { uid: 1000, gid: 1000 }));
        for bad in ["root", "0", "0:0", "1000:0", "", ":5", "-1", "1000:x", "4294967295", "1e3"] {
            assert!(bad.parse::<User>().is_err(), "{bad}");
        }
        let profile: SandboxProfile = serde_json::from_str(r#"{"name":"p","user":"agentd"}"#).unwrap();
        assert_eq!(profile.user, User::Agentd);
        let default: SandboxProfile = serde_json::from_str(r#"{"name":"p"}"#).unwrap();
        assert_eq!(default.user, User::Sandbox);
        assert!(!serde_json::to_string(&default).unwrap().contains("user"));
        let err = serde_json::from_str::<SandboxProfile>(r#"{"name":"p","user":"root"}"#).unwrap_err();
        assert!(err.to_string().contains("expected \"sandbox\""), "{err}");
    }

    #[test]
    fn sandbox_ids_stay_in_their_range() {
        assert_eq!(sandbox_id(1), SANDBOX_ID_BASE + 1);
        assert!(is_sandbox_id(sandbox_id(u32::MAX)));
        assert!(!is_sandbox_id(0) && !is_sandbox_id(1000) && !is_sandbox_id(SANDBOX_ID_BASE - 1));
        assert!(SANDBOX_ID_BASE.checked_add(SANDBOX_ID_COUNT).is_some_and(|end| end < i32::MAX as u32));
    }
}
