//! Exec admission: what one request may do, decided in one place over plain values.
//!
//! The server's exec preparation ([`crate::exec::prepare`]) and the one-shot CLI ([`crate::oneshot`])
//! both turn a request into an [`Admitted`] exec here, or get a [`Refusal`]; neither decides
//! anything itself.
//!
//! Two kinds of input are validated before any use:
//! - **numbers** (timeouts, capture sizes) must be finite and in range, turned into [`Duration`]s with
//!   `try_from`, never with a conversion that can panic;
//! - **paths** in profiles and overrides are compared only as [`CanonicalPath`]s: absolute, every
//!   symlink followed, no `.` or `..`. Comparing text let `W/../outside`, `W/link` (a link leading out)
//!   and `W/../../..` pass as "beneath `W`". The only IO is [`CanonicalPath::resolve`]; the rules that
//!   compare ([`tighten`], [`timeout`]) are pure.
//!
//! "Stricter only" holds by construction: an effective root is either one of the server's canonical
//! roots or a canonical path beneath one of them, and every other field is the minimum, subset or
//! conjunction of the server's and the request's.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use agentd_protocol::limits::{
    DEFAULT_MAX_CAPTURE_BYTES, MAX_INLINE_CAPTURE, MAX_KEEP_SECS, MAX_OFFLOAD_CAPTURE_BYTES,
};
use agentd_protocol::message::{MAX_PROCESS_NAME, valid_process_name};
use agentd_protocol::permission::PermissionMode;
use agentd_protocol::profile::{Limits, Network, ProfileOverride, SandboxProfile};
use agentd_protocol::{ErrorCode, ExecRequest, StdinMode, TerminalSize};
use base64::Engine as _;
use thiserror::Error;

/// The largest number of seconds agentd accepts anywhere (about 31 years): far below where a
/// `Duration` or a deadline `Instant` could overflow.
pub const MAX_SECONDS: f64 = 1e9;

/// Why a request (or a profile) is not admitted. Each variant maps to one protocol error code.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Refusal {
    /// A field has an impossible value (NaN, out of range, NUL in a string, a relative root).
    #[error("{0}")]
    Invalid(String),
    /// The request would loosen the profile, or its command is not in `allowed_commands`.
    #[error("profile `{profile}`: {message}")]
    Loosen { profile: String, message: String },
}

impl Refusal {
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Invalid(_) => ErrorCode::InvalidField,
            Self::Loosen { .. } => ErrorCode::ProfileViolation,
        }
    }
}

/// An absolute path with every symlink followed and no `.` or `..`: two of them compare the way
/// the kernel resolves them. The only ways to get one are [`CanonicalPath::resolve`] (IO) and, in
/// tests, `CanonicalPath::assume`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalPath(PathBuf);

impl CanonicalPath {
    /// Resolves `path`: its deepest existing ancestor through the kernel (`realpath`, symlinks
    /// followed), then the missing rest appended. A missing rest may not contain `..` (it could not
    /// be resolved honestly); a relative path is refused (relative to what?).
    pub fn resolve(path: &str) -> Result<Self, String> {
        if path.contains('\0') {
            return Err(format!("`{}` contains a NUL byte", path.escape_debug()));
        }
        let path = Path::new(path);
        if !path.is_absolute() {
            return Err(format!("`{}` is not an absolute path", path.display()));
        }
        let mut existing = path.to_path_buf();
        let mut missing = Vec::new();
        let real = loop {
            match std::fs::canonicalize(&existing) {
                Ok(real) => break real,
                Err(_) => {
                    let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
                        // `/` always resolves; a path ending in `..` or `.` that does not resolve has
                        // a missing directory before it.
                        return Err(format!("`{}` cannot be resolved", path.display()));
                    };
                    missing.push(name.to_owned());
                    existing = parent.to_path_buf();
                }
            }
        };
        let mut resolved = real;
        for name in missing.iter().rev() {
            match Path::new(name).components().next() {
                Some(Component::Normal(_)) => resolved.push(name),
                Some(Component::CurDir) => {}
                _ => {
                    return Err(format!(
                        "`{}` names `..` below a directory that does not exist",
                        path.display()
                    ));
                }
            }
        }
        Ok(Self(resolved))
    }

    /// A path known to be canonical already (pure tests of the rules).
    #[cfg(test)]
    pub fn assume(path: &str) -> Self {
        Self(PathBuf::from(path))
    }

    /// Whether `self` is `other` or lies beneath it (component-wise, so `/a/bc` is not beneath `/a/b`).
    pub fn is_beneath(&self, other: &CanonicalPath) -> bool {
        self.0.starts_with(&other.0)
    }

    fn to_text(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }
}

/// Resolves a list of roots; the error names the field.
fn resolve_roots(roots: &[String], field: &str) -> Result<Vec<CanonicalPath>, Refusal> {
    roots
        .iter()
        .map(|root| CanonicalPath::resolve(root).map_err(|e| Refusal::Invalid(format!("{field}: {e}"))))
        .collect()
}

/// A number of seconds from the wire or the command line: finite, ≥ 0 and at most [`MAX_SECONDS`].
pub fn seconds(value: f64, field: &str) -> Result<Duration, Refusal> {
    if !(0.0..=MAX_SECONDS).contains(&value) {
        // NaN fails `contains` too.
        return Err(Refusal::Invalid(format!(
            "{field} must be a number of seconds between 0 and {MAX_SECONDS}"
        )));
    }
    Duration::try_from_secs_f64(value).map_err(|e| Refusal::Invalid(format!("{field}: {e}")))
}

/// Like [`seconds`], and above zero.
fn positive_seconds(value: f64, field: &str) -> Result<Duration, Refusal> {
    match seconds(value, field)? {
        d if d.is_zero() => Err(Refusal::Invalid(format!("{field} must be above 0 seconds"))),
        d => Ok(d),
    }
}

/// The server's profile, its roots resolved once at start: later swaps of a root for a symlink
/// cannot move it.
#[derive(Debug, Clone)]
pub struct ServerProfile {
    /// The profile as loaded, with canonical root strings.
    profile: SandboxProfile,
    writable: Option<Vec<CanonicalPath>>,
    readable: Option<Vec<CanonicalPath>>,
    max_timeout: Option<Duration>,
}

impl ServerProfile {
    /// Validates `profile` (numbers, names, roots) and resolves its roots.
    pub fn new(mut profile: SandboxProfile) -> Result<Self, Refusal> {
        if profile.name.is_empty() {
            return Err(Refusal::Invalid("name must not be empty".to_owned()));
        }
        let default_timeout =
            profile.default_timeout.map(|s| positive_seconds(s, "default_timeout")).transpose()?;
        let max_timeout = profile.max_timeout.map(|s| positive_seconds(s, "max_timeout")).transpose()?;
        if let (Some(default), Some(max)) = (default_timeout, max_timeout)
            && default > max
        {
            return Err(Refusal::Invalid("default_timeout is above max_timeout".to_owned()));
        }
        let writable =
            profile.writable_roots.as_deref().map(|r| resolve_roots(r, "writable_roots")).transpose()?;
        let readable =
            profile.readable_roots.as_deref().map(|r| resolve_roots(r, "readable_roots")).transpose()?;
        crate::permission::Permissions::new(&profile.permissions)
            .map_err(|e| Refusal::Invalid(format!("permissions: {e}")))?;
        profile.writable_roots = writable.as_ref().map(|r| r.iter().map(CanonicalPath::to_text).collect());
        profile.readable_roots = readable.as_ref().map(|r| r.iter().map(CanonicalPath::to_text).collect());
        Ok(Self { profile, writable, readable, max_timeout })
    }

    /// The profile with canonical roots.
    pub fn profile(&self) -> &SandboxProfile {
        &self.profile
    }
}

/// A request's override with its roots resolved (the IO half of admission).
#[derive(Debug, Clone)]
pub struct ResolvedOverride {
    over: ProfileOverride,
    writable: Option<Vec<CanonicalPath>>,
    readable: Option<Vec<CanonicalPath>>,
}

impl ResolvedOverride {
    pub fn resolve(over: &ProfileOverride) -> Result<Self, Refusal> {
        Ok(Self {
            over: over.clone(),
            writable: over
                .writable_roots
                .as_deref()
                .map(|r| resolve_roots(r, "writable_roots"))
                .transpose()?,
            readable: over
                .readable_roots
                .as_deref()
                .map(|r| resolve_roots(r, "readable_roots"))
                .transpose()?,
        })
    }
}

/// The profile for one command: the server's, tightened by `over`; anything looser is refused.
/// Pure.
pub fn tighten(base: &ServerProfile, over: Option<&ResolvedOverride>) -> Result<SandboxProfile, Refusal> {
    let mut out = base.profile.clone();
    let Some(resolved) = over else { return Ok(out) };
    let over = &resolved.over;
    let loosen = |message: String| Refusal::Loosen { profile: base.profile.name.clone(), message };
    if let Some(roots) = &resolved.writable {
        within(roots, base.writable.as_deref(), "writable_roots").map_err(loosen)?;
        out.writable_roots = Some(roots.iter().map(CanonicalPath::to_text).collect());
    }
    if let Some(roots) = &resolved.readable {
        within(roots, base.readable.as_deref(), "readable_roots").map_err(loosen)?;
        out.readable_roots = Some(roots.iter().map(CanonicalPath::to_text).collect());
    }
    if !over.permissions.is_empty() {
        crate::permission::Permissions::new(&over.permissions)
            .map_err(|e| Refusal::Invalid(format!("profile.permissions: {e}")))?;
        if let Some(allow) = over.permissions.iter().find(|r| r.mode == PermissionMode::Allow) {
            return Err(loosen(format!(
                "permissions: a request may add only deny rules (they go first); `{allow}` could loosen \
                 the profile's rules"
            )));
        }
        out.permissions = over.permissions.iter().cloned().chain(out.permissions).collect();
    }
    match (over.network, base.profile.network) {
        (Some(Network::Allow), Network::Deny) => {
            return Err(loosen("network = \"allow\" would loosen network = \"deny\"".to_owned()));
        }
        (Some(network), _) => out.network = network,
        (None, _) => {}
    }
    if let Some(names) = &over.env_allowlist {
        subset(names, base.profile.env_allowlist.as_deref(), "env_allowlist").map_err(loosen)?;
        out.env_allowlist = Some(names.clone());
    }
    if let Some(words) = &over.allowed_commands {
        subset(words, base.profile.allowed_commands.as_deref(), "allowed_commands").map_err(loosen)?;
        out.allowed_commands = Some(words.clone());
    }
    if let Some(limits) = &over.limits {
        out.limits = tighter_limits(&base.profile.limits, limits).map_err(loosen)?;
    }
    if let Some(max) = over.max_timeout {
        let asked = positive_seconds(max, "profile.max_timeout")?;
        if let Some(base_max) = base.max_timeout
            && asked > base_max
        {
            return Err(loosen(format!(
                "max_timeout {max} is above the profile's {}",
                base_max.as_secs_f64()
            )));
        }
        out.max_timeout = Some(max);
        // The server's default stays within the tighter maximum.
        if out.default_timeout.is_some_and(|d| d > max) {
            out.default_timeout = Some(max);
        }
    }
    Ok(out)
}

/// Each of `roots` lies beneath one of `allowed` (absent: anything is allowed).
fn within(roots: &[CanonicalPath], allowed: Option<&[CanonicalPath]>, field: &str) -> Result<(), String> {
    let Some(allowed) = allowed else { return Ok(()) };
    for root in roots {
        if !allowed.iter().any(|a| root.is_beneath(a)) {
            let allowed: Vec<String> = allowed.iter().map(CanonicalPath::to_text).collect();
            return Err(format!(
                "{field}: `{}` (resolved) is not beneath the profile's {}",
                root.0.display(),
                allowed.join(", ")
            ));
        }
    }
    Ok(())
}

fn subset(names: &[String], allowed: Option<&[String]>, field: &str) -> Result<(), String> {
    let Some(allowed) = allowed else { return Ok(()) };
    match names.iter().find(|n| !allowed.contains(n)) {
        Some(extra) => Err(format!("{field}: `{extra}` is not in the profile's list")),
        None => Ok(()),
    }
}

fn tighter_limits(base: &Limits, over: &Limits) -> Result<Limits, String> {
    let pick = |name: &str, base: Option<u64>, over: Option<u64>| match (base, over) {
        (Some(b), Some(o)) if o > b => Err(format!("limits.{name} = {o} is above the profile's {b}")),
        (_, Some(o)) => Ok(Some(o)),
        (b, None) => Ok(b),
    };
    Ok(Limits {
        cpu_seconds: pick("cpu_seconds", base.cpu_seconds, over.cpu_seconds)?,
        address_space: pick("address_space", base.address_space, over.address_space)?,
        processes: pick("processes", base.processes, over.processes)?,
        file_size: pick("file_size", base.file_size, over.file_size)?,
        open_files: pick("open_files", base.open_files, over.open_files)?,
    })
}

/// The advisory `allowed_commands` check on the command's first word. Pure.
pub fn check_command(profile: &SandboxProfile, command: &str) -> Result<(), Refusal> {
    let Some(allowed) = &profile.allowed_commands else { return Ok(()) };
    let word = command.split_whitespace().next().unwrap_or("");
    let name = word.rsplit('/').next().unwrap_or(word);
    if allowed.iter().any(|a| a == word || a == name) {
        return Ok(());
    }
    Err(Refusal::Loosen {
        profile: profile.name.clone(),
        message: format!("does not allow the command `{word}` (allowed: {})", allowed.join(", ")),
    })
}

/// The timeout of one command. Pure.
///
/// `asked`: the request's (`None`: the default; `0`: no limit). The default is the profile's
/// `default_timeout`, else the server's, never above the profile's `max_timeout`; a request above
/// `max_timeout` (or "no limit" under one) is refused.
pub fn timeout(
    server_default: Option<Duration>,
    profile: Option<&SandboxProfile>,
    asked: Option<f64>,
) -> Result<Option<Duration>, Refusal> {
    let max = profile.and_then(|p| p.max_timeout).map(|s| positive_seconds(s, "max_timeout")).transpose()?;
    let profile_default = profile
        .and_then(|p| p.default_timeout)
        .map(|s| positive_seconds(s, "default_timeout"))
        .transpose()?;
    let default = match (profile_default, server_default, max) {
        (Some(d), _, _) => Some(d),
        (None, Some(d), Some(m)) => Some(d.min(m)),
        (None, None, Some(m)) => Some(m),
        (None, d, None) => d,
    };
    let chosen = match asked {
        None => default,
        Some(t) => match seconds(t, "`timeout`")? {
            d if d.is_zero() => None,
            d => Some(d),
        },
    };
    if let Some(max) = max
        && chosen.is_none_or(|c| c > max)
    {
        let asked = chosen.map_or("no limit".to_owned(), |c| format!("a timeout of {} s", c.as_secs_f64()));
        return Err(Refusal::Loosen {
            profile: profile.map(|p| p.name.clone()).unwrap_or_default(),
            message: format!("{asked} is above the profile's max_timeout of {} s", max.as_secs_f64()),
        });
    }
    Ok(chosen)
}

/// What the server decided about its own commands, once at start.
#[derive(Debug, Clone)]
pub struct ServerPolicy {
    /// `--profile`: every command runs under it. `None`: commands are unconfined unless a request
    /// brings an override (then it tightens an empty profile).
    pub profile: Option<ServerProfile>,
    /// `--default-timeout` (`None`: no limit).
    pub default_timeout: Option<Duration>,
}

/// Where the output of an admitted exec goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Capture {
    Inline,
    Offload { path: String, inline_budget: u64 },
}

/// An exec that may run, with every value validated.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// The effective profile (`None`: unconfined).
    pub profile: Option<SandboxProfile>,
    pub timeout: Option<Duration>,
    pub command: String,
    pub cwd: Option<String>,
    pub env: BTreeMap<String, String>,
    pub stdin: Option<Vec<u8>>,
    /// Stdin is a pipe left open for `write_stdin`.
    pub stdin_pipe: bool,
    pub pty: Option<TerminalSize>,
    /// Kept: the grace it may run unattached (`Some(None)`: no limit).
    pub keep: Option<Option<Duration>>,
    /// The kept process's name, the client's choice.
    pub process: Option<String>,
    pub max_capture_bytes: u64,
    pub capture: Capture,
}

/// Admits one exec request. The only IO is resolving the override's roots.
pub fn admit(policy: &ServerPolicy, request: ExecRequest) -> Result<Admitted, Refusal> {
    let over = request.profile.as_deref().map(ResolvedOverride::resolve).transpose()?;
    let empty;
    let base = match (&policy.profile, &over) {
        (Some(base), _) => Some(base),
        (None, Some(_)) => {
            empty =
                ServerProfile::new(SandboxProfile { name: "none".to_owned(), ..SandboxProfile::default() })?;
            Some(&empty)
        }
        (None, None) => None,
    };
    let profile = base.map(|base| tighten(base, over.as_ref())).transpose()?;
    if let Some(profile) = &profile {
        check_command(profile, &request.command)?;
    }
    let timeout = timeout(policy.default_timeout, profile.as_ref(), request.timeout)?;
    let invalid = |message: &str| Refusal::Invalid(message.to_owned());
    if request.command.contains('\0')
        || request.env.iter().any(|(k, v)| k.contains(['\0', '=']) || k.is_empty() || v.contains('\0'))
    {
        return Err(invalid(
            "`command` and `env` must not contain NUL, and env names must not be empty or contain `=`",
        ));
    }
    if request.cwd.as_deref().is_some_and(|c| c.is_empty() || c.contains('\0')) {
        return Err(invalid("`cwd` must be a non-empty path without NUL"));
    }
    let stdin = match &request.stdin_base64 {
        None => None,
        Some(b64) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| Refusal::Invalid(format!("`stdin_base64` is not valid base64: {e}")))?,
        ),
    };
    let keep = match request.keep {
        None => None,
        Some(secs) if !(0.0..=MAX_KEEP_SECS).contains(&secs) => {
            return Err(Refusal::Invalid(format!(
                "`keep` must be a number of seconds from 0 (no limit) to {MAX_KEEP_SECS}"
            )));
        }
        Some(secs) => Some(Some(seconds(secs, "`keep`")?).filter(|grace| !grace.is_zero())),
    };
    let stdin_pipe = request.stdin == Some(StdinMode::Pipe);
    if stdin.is_some() && (stdin_pipe || request.pty.is_some()) {
        return Err(invalid(
            "`stdin_base64` cannot be combined with `stdin: \"pipe\"` or `pty`: send the bytes with `write_stdin`",
        ));
    }
    if let Some(size) = request.pty
        && (size.rows == 0 || size.cols == 0)
    {
        return Err(invalid("`pty.rows` and `pty.cols` must be at least 1"));
    }
    if let Some(name) = &request.process {
        if keep.is_none() {
            return Err(invalid("`process` names a kept process: it needs `keep`"));
        }
        if !valid_process_name(name) {
            return Err(Refusal::Invalid(format!(
                "`process` must be 1 to {MAX_PROCESS_NAME} ASCII letters, digits, `.`, `_` or `-`"
            )));
        }
    }
    if keep.is_some() && request.offload.is_some() {
        return Err(invalid(
            "`keep` cannot be combined with `offload`: a kept exec's output is in its journal (see `attach`)",
        ));
    }
    let max_capture_bytes = request.max_capture_bytes.unwrap_or(DEFAULT_MAX_CAPTURE_BYTES);
    if max_capture_bytes == 0 {
        return Err(invalid("`max_capture_bytes` must be at least 1"));
    }
    // Plain execs are clamped where their inline cap is chosen; offloaded ones here.
    let max_capture_bytes = max_capture_bytes.min(MAX_OFFLOAD_CAPTURE_BYTES);
    let capture = match request.offload {
        None => Capture::Inline,
        Some(offload) if offload.capture_path.is_empty() || offload.capture_path.contains('\0') => {
            return Err(invalid("`offload.capture_path` must be a non-empty path without NUL"));
        }
        // Output within the inline budget travels in one reply: bounded like a plain exec's.
        Some(offload) => Capture::Offload {
            path: offload.capture_path,
            inline_budget: offload.inline_budget.min(MAX_INLINE_CAPTURE),
        },
    };
    Ok(Admitted {
        profile,
        timeout,
        command: request.command,
        cwd: request.cwd,
        env: request.env,
        stdin,
        stdin_pipe,
        pty: request.pty,
        keep,
        process: request.process,
        max_capture_bytes,
        capture,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(profile: SandboxProfile) -> ServerProfile {
        // Pure: roots taken as canonical already.
        let writable =
            profile.writable_roots.as_ref().map(|r| r.iter().map(|p| CanonicalPath::assume(p)).collect());
        let readable =
            profile.readable_roots.as_ref().map(|r| r.iter().map(|p| CanonicalPath::assume(p)).collect());
        let max_timeout = profile.max_timeout.map(Duration::from_secs_f64);
        ServerProfile { profile, writable, readable, max_timeout }
    }

    fn base() -> ServerProfile {
        server(SandboxProfile {
            name: "p".to_owned(),
            writable_roots: Some(vec!["/w".to_owned()]),
            readable_roots: Some(vec!["/usr".to_owned(), "/w".to_owned()]),
            network: Network::Deny,
            env_allowlist: Some(vec!["PATH".to_owned()]),
            allowed_commands: Some(vec!["ls".to_owned(), "cat".to_owned()]),
            limits: Limits {
                cpu_seconds: Some(10),
                address_space: Some(1 << 30),
                processes: Some(64),
                file_size: Some(1 << 20),
                open_files: Some(64),
            },
            default_timeout: Some(10.0),
            max_timeout: Some(60.0),
            ..SandboxProfile::default()
        })
    }

    fn over_roots(writable: &[&str]) -> ResolvedOverride {
        ResolvedOverride {
            over: ProfileOverride::default(),
            writable: Some(writable.iter().map(|p| CanonicalPath::assume(p)).collect()),
            readable: None,
        }
    }

    fn pure(over: ProfileOverride) -> ResolvedOverride {
        ResolvedOverride { over, writable: None, readable: None }
    }

    fn loosens(result: Result<SandboxProfile, Refusal>) -> bool {
        matches!(result, Err(Refusal::Loosen { .. }))
    }

    #[test]
    fn roots_compare_by_component_after_resolution() {
        let b = base();
        assert!(tighten(&b, Some(&over_roots(&["/w/sub"]))).is_ok());
        assert!(tighten(&b, Some(&over_roots(&["/w"]))).is_ok());
        assert!(loosens(tighten(&b, Some(&over_roots(&["/wx"])))));
        assert!(loosens(tighten(&b, Some(&over_roots(&["/"])))));
        assert!(loosens(tighten(&b, Some(&over_roots(&["/w/sub", "/etc"])))));
        let readable = ResolvedOverride {
            over: ProfileOverride::default(),
            writable: None,
            readable: Some(vec![CanonicalPath::assume("/etc")]),
        };
        assert!(loosens(tighten(&b, Some(&readable))));
    }

    #[test]
    fn every_loosening_direction_is_refused() {
        let b = base();
        let cases = [
            ProfileOverride { network: Some(Network::Allow), ..ProfileOverride::default() },
            ProfileOverride { env_allowlist: Some(vec!["HOME".to_owned()]), ..ProfileOverride::default() },
            ProfileOverride { allowed_commands: Some(vec!["sh".to_owned()]), ..ProfileOverride::default() },
            ProfileOverride { max_timeout: Some(61.0), ..ProfileOverride::default() },
            ProfileOverride {
                limits: Some(Limits { cpu_seconds: Some(11), ..Limits::default() }),
                ..ProfileOverride::default()
            },
            ProfileOverride {
                limits: Some(Limits { address_space: Some(1 << 31), ..Limits::default() }),
                ..ProfileOverride::default()
            },
            ProfileOverride {
                limits: Some(Limits { processes: Some(65), ..Limits::default() }),
                ..ProfileOverride::default()
            },
            ProfileOverride {
                limits: Some(Limits { file_size: Some(1 << 21), ..Limits::default() }),
                ..ProfileOverride::default()
            },
            ProfileOverride {
                limits: Some(Limits { open_files: Some(65), ..Limits::default() }),
                ..ProfileOverride::default()
            },
        ];
        for over in cases {
            assert!(loosens(tighten(&b, Some(&pure(over.clone())))), "{over:?} was admitted");
        }
        // Absent base fields allow anything; equal values are not looser.
        let open = server(SandboxProfile { name: "open".to_owned(), ..SandboxProfile::default() });
        let anything = ProfileOverride {
            env_allowlist: Some(vec!["HOME".to_owned()]),
            limits: Some(Limits { processes: Some(1 << 40), ..Limits::default() }),
            max_timeout: Some(5.0),
            ..ProfileOverride::default()
        };
        assert!(tighten(&open, Some(&pure(anything))).is_ok());
        let same = ProfileOverride {
            limits: Some(Limits { processes: Some(64), ..Limits::default() }),
            ..ProfileOverride::default()
        };
        assert_eq!(tighten(&b, Some(&pure(same))).unwrap().limits.processes, Some(64));
    }

    fn rule(mode: PermissionMode, path: &str) -> agentd_protocol::permission::PermissionRule {
        agentd_protocol::permission::PermissionRule {
            operations: vec![agentd_protocol::permission::Operation::Write],
            paths: vec![path.to_owned()],
            mode,
        }
    }

    #[test]
    fn a_request_may_only_put_deny_rules_first() {
        let mut profile = base().profile;
        profile.permissions =
            vec![rule(PermissionMode::Allow, "/w/gen/**"), rule(PermissionMode::Deny, "/w/**")];
        let b = server(profile);
        let deny = ProfileOverride {
            permissions: vec![rule(PermissionMode::Deny, "/w/gen/secret/**")],
            ..ProfileOverride::default()
        };
        let tightened = tighten(&b, Some(&pure(deny))).unwrap();
        let paths: Vec<&str> = tightened.permissions.iter().map(|r| r.paths[0].as_str()).collect();
        assert_eq!(paths, ["/w/gen/secret/**", "/w/gen/**", "/w/**"]);
        // An allow first would undo the profile's deny of /w.
        let allow = ProfileOverride {
            permissions: vec![rule(PermissionMode::Allow, "/w/**")],
            ..ProfileOverride::default()
        };
        let refused = tighten(&b, Some(&pure(allow)));
        assert!(loosens(refused.clone()), "{refused:?}");
        assert_eq!(refused.unwrap_err().code(), ErrorCode::ProfileViolation);
        // A bad rule is invalid, not a loosening.
        for bad in ["w/**", "/w/../etc", "/~/x"] {
            let over = ProfileOverride {
                permissions: vec![rule(PermissionMode::Deny, bad)],
                ..ProfileOverride::default()
            };
            assert!(matches!(tighten(&b, Some(&pure(over))), Err(Refusal::Invalid(_))), "{bad}");
        }
        let mut bad = base().profile;
        bad.permissions = vec![rule(PermissionMode::Deny, "relative/**")];
        let err = ServerProfile::new(bad).unwrap_err();
        assert!(err.to_string().contains("Permission path must start with '/'"), "{err}");
    }

    #[test]
    fn tightening_is_kept() {
        let b = base();
        let over = ProfileOverride {
            limits: Some(Limits { processes: Some(8), ..Limits::default() }),
            max_timeout: Some(5.0),
            env_allowlist: Some(vec![]),
            ..ProfileOverride::default()
        };
        let p = tighten(&b, Some(&pure(over))).unwrap();
        assert_eq!(p.limits.processes, Some(8));
        assert_eq!(p.limits.cpu_seconds, Some(10), "unnamed limits keep the base's");
        assert_eq!((p.max_timeout, p.default_timeout), (Some(5.0), Some(5.0)));
        assert_eq!(p.env_allowlist, Some(vec![]));
        assert_eq!(p.network, Network::Deny);
    }

    #[test]
    fn numbers_are_finite_and_in_range() {
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, 1e20, 1e300, MAX_SECONDS * 2.0] {
            assert!(matches!(seconds(bad, "t"), Err(Refusal::Invalid(_))), "{bad} accepted");
            assert!(matches!(timeout(None, None, Some(bad)), Err(Refusal::Invalid(_))), "{bad} accepted");
            let over = ProfileOverride { max_timeout: Some(bad), ..ProfileOverride::default() };
            assert!(tighten(&base(), Some(&pure(over))).is_err(), "max_timeout {bad} accepted");
            for field in ["default", "max"] {
                let mut p = SandboxProfile { name: "n".to_owned(), ..SandboxProfile::default() };
                if field == "default" {
                    p.default_timeout = Some(bad)
                } else {
                    p.max_timeout = Some(bad)
                }
                assert!(ServerProfile::new(p).is_err(), "{field}_timeout {bad} accepted");
            }
        }
        assert_eq!(seconds(0.0, "t"), Ok(Duration::ZERO));
        assert_eq!(seconds(MAX_SECONDS, "t"), Ok(Duration::from_secs(1_000_000_000)));
        assert_eq!(seconds(0.25, "t"), Ok(Duration::from_millis(250)));
    }

    #[test]
    fn timeouts_follow_default_and_max() {
        let b = base().profile;
        let secs = |s: u64| Some(Duration::from_secs(s));
        assert_eq!(timeout(secs(1800), Some(&b), None), Ok(secs(10)), "profile default");
        assert_eq!(timeout(secs(1800), None, None), Ok(secs(1800)), "server default");
        assert_eq!(timeout(secs(1800), None, Some(0.0)), Ok(None), "0 = no limit");
        let no_default = SandboxProfile { default_timeout: None, ..b.clone() };
        assert_eq!(timeout(secs(1800), Some(&no_default), None), Ok(secs(60)), "server default capped");
        assert_eq!(timeout(None, Some(&no_default), None), Ok(secs(60)));
        assert_eq!(timeout(None, Some(&b), Some(30.0)), Ok(secs(30)));
        assert!(matches!(timeout(None, Some(&b), Some(61.0)), Err(Refusal::Loosen { .. })));
        assert!(
            matches!(timeout(None, Some(&b), Some(0.0)), Err(Refusal::Loosen { .. })),
            "no limit under a max"
        );
    }

    #[test]
    fn commands_checked_by_first_word() {
        let b = base().profile;
        assert!(check_command(&b, "ls -la").is_ok());
        assert!(check_command(&b, "/bin/cat x").is_ok());
        assert!(check_command(&b, "rm -rf /").is_err());
        assert!(check_command(&b, "").is_err());
    }

    #[test]
    fn resolution_follows_links_dots_and_slashes() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path().canonicalize().unwrap().join("w");
        let outside = dir.path().canonicalize().unwrap().join("outside");
        std::fs::create_dir_all(w.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, w.join("link")).unwrap();
        std::os::unix::fs::symlink("../outside", w.join("rel")).unwrap();
        let text = |p: &Path| p.to_str().unwrap().to_owned();
        let resolve = |p: String| CanonicalPath::resolve(&p).map(|c| c.0);
        let w_text = text(&w);
        assert_eq!(resolve(format!("{w_text}/../outside")), Ok(outside.clone()));
        assert_eq!(resolve(format!("{w_text}/link")), Ok(outside.clone()));
        assert_eq!(resolve(format!("{w_text}/rel/")), Ok(outside.clone()));
        assert_eq!(resolve(format!("{w_text}/link/new/deeper")), Ok(outside.join("new/deeper")));
        assert_eq!(resolve(format!("{w_text}/../../..")), Ok(PathBuf::from("/")));
        assert_eq!(resolve(format!("{w_text}/sub/./")), Ok(w.join("sub")));
        assert_eq!(resolve(format!("{w_text}//sub")), Ok(w.join("sub")));
        assert_eq!(resolve(format!("{w_text}/new/./x")), Ok(w.join("new/x")));
        assert!(resolve(format!("{w_text}/new/../../x")).is_err(), "`..` under a missing directory");
        assert!(resolve("relative/path".to_owned()).is_err());
        assert!(resolve("".to_owned()).is_err());
        assert!(resolve("/a\0b".to_owned()).is_err());

        // Each of the attacks, end to end through resolution and the rule.
        let policy = ServerProfile::new(SandboxProfile {
            name: "p".to_owned(),
            writable_roots: Some(vec![w_text.clone()]),
            ..SandboxProfile::default()
        })
        .unwrap();
        for attack in [
            format!("{w_text}/../outside"),
            format!("{w_text}/link"),
            format!("{w_text}/../../.."),
            format!("{w_text}/rel/x"),
        ] {
            let over =
                ProfileOverride { writable_roots: Some(vec![attack.clone()]), ..ProfileOverride::default() };
            let resolved = ResolvedOverride::resolve(&over).unwrap();
            assert!(loosens(tighten(&policy, Some(&resolved))), "{attack} admitted");
        }
        let over = ProfileOverride {
            writable_roots: Some(vec![format!("{w_text}/sub/")]),
            ..ProfileOverride::default()
        };
        let p = tighten(&policy, Some(&ResolvedOverride::resolve(&over).unwrap())).unwrap();
        assert_eq!(p.writable_roots, Some(vec![text(&w.join("sub"))]), "canonical roots go to the kernel");
        let relative =
            ProfileOverride { writable_roots: Some(vec!["sub".to_owned()]), ..ProfileOverride::default() };
        assert!(matches!(ResolvedOverride::resolve(&relative), Err(Refusal::Invalid(_))));
    }

    #[test]
    fn a_link_in_the_servers_roots_is_resolved_once() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("alias")).unwrap();
        let policy = ServerProfile::new(SandboxProfile {
            name: "p".to_owned(),
            writable_roots: Some(vec![dir.path().join("alias").to_str().unwrap().to_owned()]),
            ..SandboxProfile::default()
        })
        .unwrap();
        assert_eq!(policy.profile().writable_roots, Some(vec![real.to_str().unwrap().to_owned()]));
    }

    #[test]
    fn requests_are_validated() {
        let policy = ServerPolicy { profile: None, default_timeout: Some(Duration::from_secs(1800)) };
        let request = |f: &dyn Fn(&mut ExecRequest)| {
            let mut r = ExecRequest { command: "true".to_owned(), ..ExecRequest::default() };
            f(&mut r);
            admit(&policy, r)
        };
        assert!(
            request(&|_| {})
                .is_ok_and(|a| a.profile.is_none() && a.timeout == Some(Duration::from_secs(1800)))
        );
        assert!(request(&|r| r.timeout = Some(1e20)).is_err());
        assert!(request(&|r| r.timeout = Some(-0.5)).is_err());
        assert!(request(&|r| r.command = "a\0b".to_owned()).is_err());
        assert!(
            request(&|r| {
                r.env.insert("A=B".to_owned(), "x".to_owned());
            })
            .is_err()
        );
        assert!(request(&|r| r.max_capture_bytes = Some(0)).is_err());
        let huge = request(&|r| r.max_capture_bytes = Some(u64::MAX)).unwrap();
        assert_eq!(huge.max_capture_bytes, MAX_OFFLOAD_CAPTURE_BYTES, "clamped: it bounds the disk");
        let offload = |budget| {
            request(&|r| {
                r.offload =
                    Some(agentd_protocol::Offload { capture_path: "/c".into(), inline_budget: budget })
            })
        };
        for (asked, kept) in [(100, 100), (u64::MAX, MAX_INLINE_CAPTURE)] {
            let admitted = offload(asked).unwrap();
            assert!(
                matches!(admitted.capture, Capture::Offload { inline_budget, .. } if inline_budget == kept),
                "inline_budget {asked}: one reply bounds it"
            );
        }
        assert!(request(&|r| r.stdin_base64 = Some("!!".to_owned())).is_err());
        assert!(request(&|r| r.cwd = Some(String::new())).is_err());
        // An override without a server profile tightens an empty one (and is then confined).
        let over = request(&|r| {
            r.profile =
                Some(Box::new(ProfileOverride { network: Some(Network::Deny), ..ProfileOverride::default() }))
        })
        .unwrap();
        assert_eq!(over.profile.map(|p| p.network), Some(Network::Deny));
        // A client's name for a kept process.
        let named = |name: &str, keep: Option<f64>| {
            request(&|r| {
                r.process = Some(name.to_owned());
                r.keep = keep;
            })
        };
        assert_eq!(named("h0a.b_c-9", Some(30.0)).unwrap().process.as_deref(), Some("h0a.b_c-9"));
        assert_eq!(
            named(&"x".repeat(MAX_PROCESS_NAME), Some(0.0)).unwrap().process.map(|p| p.len()),
            Some(64)
        );
        assert!(named("a", None).is_err(), "only a kept process is named");
        for bad in ["", "a b", "a/b", "é", "a\0", &"x".repeat(MAX_PROCESS_NAME + 1)] {
            assert!(named(bad, Some(30.0)).is_err(), "{bad:?}");
        }
    }
}
