//! One shape for every kind of sandbox: a [`Provider`] creates a sandbox from a spec, attaches to an
//! existing one by id, lists the ones agentd created and removes them. What it hands out is a
//! `Box<dyn BaseSandbox>`, so callers do not care which kind they got.
//!
//! Specs are `KIND:SPEC` strings ([`SandboxSpec`]), as `agentctl --sandbox` takes them:
//! `local`, `docker:IMAGE`, `docker-attach:ID`, `daytona:SNAPSHOT_OR_IMAGE`, `daytona-attach:ID`.
//! Kinds whose cargo feature is off parse, and fail with [`SandboxError::Unsupported`] when used.

use std::fmt;
use std::str::FromStr;

use async_trait::async_trait;

use crate::error::{Result, SandboxError};
use crate::sandbox::BaseSandbox;

/// The kinds of sandbox agentd-host knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A private agentd child on this machine ([`crate::LocalSandbox`]).
    Local,
    /// A Docker container (feature `docker`).
    Docker,
    /// A Daytona sandbox (feature `daytona`).
    Daytona,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Local, Kind::Docker, Kind::Daytona];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Local => "local",
            Kind::Docker => "docker",
            Kind::Daytona => "daytona",
        }
    }

    /// The cargo feature that brings this kind, if any.
    pub fn feature(self) -> Option<&'static str> {
        match self {
            Kind::Local => None,
            Kind::Docker => Some("docker"),
            Kind::Daytona => Some("daytona"),
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which sandbox to use: a new one of a kind, or an existing one by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxSpec {
    /// Create a sandbox; `source` is the kind's own spec (an image, a snapshot; empty for `local`).
    Create { kind: Kind, source: String },
    /// Attach to an existing sandbox by its id.
    Attach { kind: Kind, id: String },
}

impl SandboxSpec {
    pub fn kind(&self) -> Kind {
        match self {
            SandboxSpec::Create { kind, .. } | SandboxSpec::Attach { kind, .. } => *kind,
        }
    }
}

/// The accepted forms, for error messages and `--help`.
pub const SPEC_FORMS: &str =
    "local, docker:IMAGE, docker-attach:ID, daytona:SNAPSHOT_OR_IMAGE, daytona-attach:ID";

impl FromStr for SandboxSpec {
    type Err = SandboxError;

    fn from_str(spec: &str) -> Result<Self> {
        let invalid = |why: &str| SandboxError::InvalidSpec { spec: spec.to_owned(), why: why.to_owned() };
        let (head, rest) = spec.split_once(':').unwrap_or((spec, ""));
        let (kind, attach) = match head {
            "local" => (Kind::Local, false),
            "docker" => (Kind::Docker, false),
            "docker-attach" => (Kind::Docker, true),
            "daytona" => (Kind::Daytona, false),
            "daytona-attach" => (Kind::Daytona, true),
            _ => return Err(invalid(&format!("unknown kind; expected one of {SPEC_FORMS}"))),
        };
        match (kind, attach) {
            (Kind::Local, _) if !rest.is_empty() => Err(invalid("`local` takes nothing after it")),
            (Kind::Local, _) => Ok(SandboxSpec::Create { kind, source: String::new() }),
            (_, true) if rest.is_empty() => Err(invalid("an id is needed after the colon")),
            (_, true) => Ok(SandboxSpec::Attach { kind, id: rest.to_owned() }),
            (Kind::Docker, false) if rest.is_empty() => Err(invalid("an image is needed after the colon")),
            (_, false) => Ok(SandboxSpec::Create { kind, source: rest.to_owned() }),
        }
    }
}

/// One sandbox agentd created, as [`Provider::list`] reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SandboxInfo {
    pub kind: Kind,
    /// What [`Provider::attach`] and [`Provider::remove`] take.
    pub id: String,
    /// The image or snapshot it was made from, when known.
    pub source: String,
    /// The provider's own word for its state (`running`, `started`, `stopped`, …).
    pub state: String,
}

impl serde::Serialize for Kind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// A way to get sandboxes of one kind. Implementations label what they create so that [`list`] and
/// garbage collection find it again.
///
/// [`list`]: Provider::list
#[async_trait]
pub trait Provider: Send + Sync {
    fn kind(&self) -> Kind;

    /// Creates a sandbox from `source` (the part of the spec after `KIND:`) and connects to it.
    async fn create(&self, source: &str) -> Result<Box<dyn BaseSandbox>>;

    /// Connects to an existing sandbox.
    async fn attach(&self, id: &str) -> Result<Box<dyn BaseSandbox>>;

    /// The sandboxes of this kind that agentd created and that still exist.
    async fn list(&self) -> Result<Vec<SandboxInfo>>;

    /// Stops and removes one sandbox by id.
    async fn remove(&self, id: &str) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_into_kinds() {
        let create = |kind, source: &str| SandboxSpec::Create { kind, source: source.to_owned() };
        let attach = |kind, id: &str| SandboxSpec::Attach { kind, id: id.to_owned() };
        let cases = [
            ("local", create(Kind::Local, "")),
            ("docker:agentd-base-debian:latest", create(Kind::Docker, "agentd-base-debian:latest")),
            ("docker-attach:3f2a", attach(Kind::Docker, "3f2a")),
            ("daytona:python:3.12-slim", create(Kind::Daytona, "python:3.12-slim")),
            ("daytona:", create(Kind::Daytona, "")),
            ("daytona-attach:sb-1", attach(Kind::Daytona, "sb-1")),
        ];
        for (text, expected) in cases {
            assert_eq!(text.parse::<SandboxSpec>().unwrap(), expected, "{text}");
        }
        for bad in ["", "modal:x", "local:x", "docker", "docker:", "docker-attach:", "daytona-attach"] {
            let err = bad.parse::<SandboxSpec>().unwrap_err().to_string();
            assert!(err.contains(&format!("`{bad}`")), "{bad}: {err}");
        }
    }
}
