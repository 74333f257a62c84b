//! Path permissions: an ordered list of rules, each `{operations, paths, mode}`, the first rule whose
//! operation and path match deciding. The shape and the validation are deepagents'
//! `FilesystemPermission`'s, so one list configures both its middleware and agentd. Matching is
//! agentd's (`agent/src/permission.rs`); this module holds the types, their validation and the
//! command-line form `MODE:OPERATIONS:PATH`.
//!
//! ```
//! use agentd_protocol::permission::{Operation, PermissionMode, PermissionRule};
//!
//! let rule: PermissionRule = "deny:write:/workspace/src/**".parse().unwrap();
//! assert_eq!(rule.mode, PermissionMode::Deny);
//! assert_eq!(rule.operations, vec![Operation::Write]);
//! assert_eq!(rule.to_string(), "deny:write:/workspace/src/**");
//! assert!("deny:write:src/**".parse::<PermissionRule>().is_err());
//! ```

use serde::{Deserialize, Serialize};

/// What a rule is about: reading (ls, read, glob, grep, download, a command's reads) or writing
/// (write, edit, delete, upload, a command's writes).
///
/// Read from its name ([`std::str::FromStr`]) wherever it comes from (a profile, a request, the
/// command-line form, Python), so an unknown one is refused in the same words everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum Operation {
    Read,
    Write,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

impl std::str::FromStr for Operation {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        match name {
            "read" => Ok(Self::Read),
            "write" => Ok(Self::Write),
            other => Err(format!("operation '{}' is not \"read\" or \"write\"", other.escape_debug())),
        }
    }
}

impl TryFrom<String> for Operation {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        name.parse()
    }
}

/// What a matching rule decides. deepagents' third mode, `interrupt` (ask a person), has no
/// meaning for a kernel rule: a converter decides what it becomes (`agentd.permission_rules` in Python).
///
/// Read from its name, as [`Operation`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum PermissionMode {
    #[default]
    Allow,
    Deny,
}

impl PermissionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
        }
    }
}

impl std::str::FromStr for PermissionMode {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        match name {
            "allow" => Ok(Self::Allow),
            "deny" => Ok(Self::Deny),
            // deepagents' third mode: say why it is refused, not only that it is.
            "interrupt" => Err("mode 'interrupt' (deepagents': ask a person first) has no meaning for a \
                 kernel rule: use \"allow\" or \"deny\""
                .to_owned()),
            other => Err(format!("mode '{}' is not \"allow\" or \"deny\"", other.escape_debug())),
        }
    }
}

impl TryFrom<String> for PermissionMode {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        name.parse()
    }
}

/// One rule. In a profile file: `[[permissions]]` with `operations = ["write"]`,
/// `paths = ["/workspace/src/**"]`, `mode = "deny"` (default `"allow"`, as deepagents').
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionRule {
    pub operations: Vec<Operation>,
    /// Absolute globs: `*`, `?`, `[set]`, `{a,b}`, and `**` for any number of directories.
    pub paths: Vec<String>,
    #[serde(default)]
    pub mode: PermissionMode,
}

impl PermissionRule {
    /// deepagents' checks (absolute, no `..` or `~` segment), and a rule that can match something.
    /// The messages are deepagents' where it has them.
    pub fn validate(&self) -> Result<(), String> {
        if self.operations.is_empty() {
            return Err("a permission rule needs at least one operation (\"read\", \"write\")".to_owned());
        }
        if self.paths.is_empty() {
            return Err("a permission rule needs at least one path".to_owned());
        }
        for path in &self.paths {
            validate_path(path)?;
        }
        Ok(())
    }

    pub fn applies_to(&self, operation: Operation) -> bool {
        self.operations.contains(&operation)
    }
}

/// One glob of a rule: deepagents' `FilesystemPermission.__post_init__` checks, plus no NUL.
pub fn validate_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!("Permission path must start with '/': '{}'", path.escape_debug()));
    }
    if path.contains('\0') {
        return Err(format!("Permission path must not contain a NUL byte: '{}'", path.escape_debug()));
    }
    let parts = || path.split(['/', '\\']);
    if parts().any(|part| part == "..") {
        return Err(format!("Permission path must not contain '..': '{}'", path.escape_debug()));
    }
    if parts().any(|part| part == "~") {
        return Err(format!("Permission path must not contain '~': '{}'", path.escape_debug()));
    }
    if let Some(sequence) = brace_sequence(path) {
        // deepagents' matcher (wcmatch) expands `{1..3}` to 1, 2, 3; agentd's does not, and a deny
        // rule that silently matched less would fail open.
        return Err(format!(
            "Permission path uses the brace sequence '{sequence}', which agentd does not expand: list \
             the values instead ({{1,2,3}}): '{}'",
            path.escape_debug()
        ));
    }
    Ok(())
}

/// The first brace group of `path` that is a sequence (`{1..3}`, `{a..e}`, `{01..10..2}`: two
/// integers or two letters, and an optional integer step), as wcmatch's brace expansion reads one.
fn brace_sequence(path: &str) -> Option<&str> {
    let integer = |s: &str| {
        let digits = s.strip_prefix('-').unwrap_or(s);
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
    };
    let letter = |s: &str| s.len() == 1 && s.bytes().all(|b| b.is_ascii_alphabetic());
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let close = after.find(['{', '}'])?;
        let inner = &after[..close];
        if after[close..].starts_with('}') {
            let parts: Vec<&str> = inner.split("..").collect();
            let ends = |a: &str, b: &str| (integer(a) && integer(b)) || (letter(a) && letter(b));
            let sequence = match parts[..] {
                [a, b] => ends(a, b),
                [a, b, step] => ends(a, b) && integer(step),
                _ => false,
            };
            if sequence {
                return Some(&rest[open..open + close + 2]);
            }
        }
        rest = after;
    }
    None
}

impl std::fmt::Display for PermissionRule {
    /// `MODE:OPERATIONS:PATH` (operations joined by `,`; paths by ` `, for a person).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let operations: Vec<&str> = self.operations.iter().map(|o| o.as_str()).collect();
        write!(f, "{}:{}:{}", self.mode.as_str(), operations.join(","), self.paths.join(" "))
    }
}

impl std::str::FromStr for PermissionRule {
    type Err = String;

    /// `MODE:OPERATIONS:PATH`, e.g. `deny:write:/workspace/src/**` or `deny:read,write:/secrets/**`:
    /// one path (it may hold `:` and `,`); repeat the rule for more. The messages leave the text
    /// out: every caller names it already (clap's "invalid value", Python's `permissions[i]`).
    fn from_str(text: &str) -> Result<Self, String> {
        let mut parts = text.splitn(3, ':');
        let (Some(mode), Some(operations), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            return Err("expected MODE:OPERATIONS:PATH, e.g. deny:write:/ws/src/**".to_owned());
        };
        let mode = mode.parse()?;
        let operations = operations.split(',').map(str::parse).collect::<Result<_, _>>()?;
        let rule = Self { operations, paths: vec![path.to_owned()], mode };
        rule.validate()?;
        Ok(rule)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_read_as_deepagents_writes_them() {
        let rule: PermissionRule =
            serde_json::from_str(r#"{"operations":["write"],"paths":["/ws/src/**"],"mode":"deny"}"#).unwrap();
        assert_eq!(rule.mode, PermissionMode::Deny);
        let default: PermissionRule =
            serde_json::from_str(r#"{"operations":["read","write"],"paths":["/ws/**"]}"#).unwrap();
        assert_eq!(default.mode, PermissionMode::Allow);
        for (bad, says) in [
            (r#"{"operations":["exec"],"paths":["/x"]}"#, r#"operation 'exec' is not "read" or "write""#),
            (
                r#"{"operations":["read"],"paths":["/x"],"mode":"block"}"#,
                r#"mode 'block' is not "allow" or "deny""#,
            ),
            (r#"{"operations":["read"],"paths":["/x"],"mode":"interrupt"}"#, "ask a person first"),
            (r#"{"operations":["read"],"paths":["/x"],"modes":"deny"}"#, "unknown field `modes`"),
            (r#"{"paths":["/x"]}"#, "missing field `operations`"),
        ] {
            let err = serde_json::from_str::<PermissionRule>(bad).unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn paths_are_checked_as_deepagents_checks_them() {
        for (bad, says) in [
            ("ws/**", "must start with '/'"),
            ("/ws/../etc", "must not contain '..'"),
            ("/ws\\..\\etc", "must not contain '..'"),
            ("/~/x", "must not contain '~'"),
            ("/a\0b", "NUL"),
            // Sequences wcmatch expands (checked against wcmatch 10: `/ws/{1..3}/**` matches
            // `/ws/2/x`), which agentd's expansion would leave literal.
            ("/ws/{1..3}/**", "brace sequence '{1..3}'"),
            ("/ws/{a..c}/**", "brace sequence '{a..c}'"),
            ("/ws/{01..10..2}", "brace sequence '{01..10..2}'"),
            ("/ws/{x,{-1..1}}", "brace sequence '{-1..1}'"),
        ] {
            let err = validate_path(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
        // Not sequences: wcmatch leaves these as they are (or as alternatives).
        for good in [
            "/",
            "/**",
            "/ws/**/*.env",
            "/ws/..x/y",
            "/ws/~x",
            "/ws/{a,b}/[!c]?",
            "/ws/{x..}",
            "/ws/{ab..c}",
            "/ws/{1..a}",
            "/ws/{1..2,3}",
        ] {
            assert_eq!(validate_path(good), Ok(()), "{good}");
        }
        let empty =
            PermissionRule { operations: vec![], paths: vec!["/x".into()], mode: PermissionMode::Deny };
        assert!(empty.validate().is_err());
        let none =
            PermissionRule { operations: vec![Operation::Read], paths: vec![], mode: PermissionMode::Deny };
        assert!(none.validate().is_err());
    }

    #[test]
    fn the_command_line_form_round_trips() {
        let rule: PermissionRule = "deny:read,write:/a:b/{x,y}/**".parse().unwrap();
        assert_eq!(rule.operations, vec![Operation::Read, Operation::Write]);
        assert_eq!(rule.paths, vec!["/a:b/{x,y}/**".to_owned()]);
        assert_eq!(rule.to_string().parse::<PermissionRule>(), Ok(rule));
        // The same words as a profile's or a request's rules (the caller names the text).
        for (bad, says) in [
            ("deny:write", "expected MODE:OPERATIONS:PATH, e.g. deny:write:/ws/src/**"),
            ("", "expected MODE:OPERATIONS:PATH"),
            ("block:write:/x", r#"mode 'block' is not "allow" or "deny""#),
            ("block:exec:/x", "mode 'block'"),
            ("interrupt:write:/x", "ask a person first"),
            ("deny:exec:/x", r#"operation 'exec' is not "read" or "write""#),
            ("deny::/x", r#"operation '' is not "read" or "write""#),
            ("deny:read,:/x", "operation ''"),
            ("deny:write:x", "Permission path must start with '/': 'x'"),
            ("deny:write:/ws/../x", "Permission path must not contain '..': '/ws/../x'"),
        ] {
            let err = bad.parse::<PermissionRule>().unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
