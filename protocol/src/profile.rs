//! Sandbox profiles: what a command may touch (`writable_roots`, `readable_roots`, `network`), see
//! (`env_allowlist`, `env`), run (`allowed_commands`, advisory) and use (`limits`, timeouts), and the
//! report of what agentd actually enforced.
//!
//! A profile is loaded by `agentd serve --profile FILE` (TOML, the same field names). A request may
//! carry a [`ProfileOverride`] that only tightens it; agentd refuses one that would loosen it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
    /// First words a command may start with. Advisory: `sh -c` can run anything, so this is a
    /// guard rail against mistakes, not a wall.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_commands: Option<Vec<String>>,
    #[serde(default)]
    pub limits: Limits,
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
    /// `limits` (rlimits, pids cgroup).
    pub limits: Level,
    /// For a person: why something is less than full, and what agentd withholds from every command
    /// (its token file, the cgroup tree: one note starting `withheld:`).
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
    }
}
