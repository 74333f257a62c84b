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
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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

/// What a matching rule decides. deepagents' third mode, `interrupt` (ask a person), has no
/// meaning for a kernel rule: a converter decides what it becomes (`agentd.permission_rules` in Python).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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
    Ok(())
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
    /// one path (it may hold `:` and `,`); repeat the rule for more.
    fn from_str(text: &str) -> Result<Self, String> {
        let shape =
            || format!("permission `{text}`: expected MODE:OPERATIONS:PATH, e.g. deny:write:/ws/src/**");
        let mut parts = text.splitn(3, ':');
        let (Some(mode), Some(operations), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(shape());
        };
        let mode = match mode {
            "allow" => PermissionMode::Allow,
            "deny" => PermissionMode::Deny,
            other => return Err(format!("permission `{text}`: mode `{other}` is not \"allow\" or \"deny\"")),
        };
        let operations = operations
            .split(',')
            .map(|op| match op {
                "read" => Ok(Operation::Read),
                "write" => Ok(Operation::Write),
                other => {
                    Err(format!("permission `{text}`: operation `{other}` is not \"read\" or \"write\""))
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let rule = Self { operations, paths: vec![path.to_owned()], mode };
        rule.validate().map_err(|e| format!("permission `{text}`: {e}"))?;
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
        assert!(serde_json::from_str::<PermissionRule>(r#"{"operations":["exec"],"paths":["/x"]}"#).is_err());
        assert!(
            serde_json::from_str::<PermissionRule>(
                r#"{"operations":["read"],"paths":["/x"],"mode":"interrupt"}"#
            )
            .is_err()
        );
    }

    #[test]
    fn paths_are_checked_as_deepagents_checks_them() {
        for (bad, says) in [
            ("ws/**", "must start with '/'"),
            ("/ws/../etc", "must not contain '..'"),
            ("/ws\\..\\etc", "must not contain '..'"),
            ("/~/x", "must not contain '~'"),
            ("/a\0b", "NUL"),
        ] {
            let err = validate_path(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
        for good in ["/", "/**", "/ws/**/*.env", "/ws/..x/y", "/ws/~x", "/ws/{a,b}/[!c]?"] {
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
        for bad in ["deny:write", "block:write:/x", "deny:exec:/x", "deny:write:x", "deny::/x", ""] {
            assert!(bad.parse::<PermissionRule>().is_err(), "{bad}");
        }
    }
}
