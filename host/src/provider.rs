//! One shape for every kind of sandbox: a [`Provider`] creates a sandbox from a spec, attaches to an
//! existing one by id, lists the ones agentd created and removes them. What it hands out is a
//! `Box<dyn BaseSandbox>`, so callers do not care which kind they got.
//!
//! Specs are `KIND:SPEC` strings ([`SandboxSpec`]), as `agentctl --sandbox` takes them:
//! `local`, `docker:IMAGE`, `docker-attach:ID`, `daytona:SNAPSHOT_OR_IMAGE`, `daytona-attach:ID`,
//! `modal:IMAGE`, `modal-attach:SANDBOX_ID`.
//! Kinds whose cargo feature is off parse, and fail with [`SandboxError::Unsupported`] when used.
//!
//! [`provider`] gives the provider of a kind; [`open`] turns a spec into a sandbox in one call.

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
    /// A Modal sandbox (feature `modal`).
    Modal,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Local, Kind::Docker, Kind::Daytona, Kind::Modal];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Local => "local",
            Kind::Docker => "docker",
            Kind::Daytona => "daytona",
            Kind::Modal => "modal",
        }
    }

    /// The kind named `name` (`local`, `docker`, `daytona`, `modal`).
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// Whether this build of agentd-host has this kind (its cargo feature is on).
    pub fn built(self) -> bool {
        match self {
            Kind::Local => true,
            Kind::Docker => cfg!(feature = "docker"),
            Kind::Daytona => cfg!(feature = "daytona"),
            Kind::Modal => cfg!(feature = "modal"),
        }
    }

    /// Why this kind cannot be used here, if it cannot: its feature is off, or (Daytona, Modal)
    /// its credentials are not set. Listing across kinds skips such kinds; opening one fails with
    /// this reason.
    pub fn unavailable(self) -> Option<String> {
        let modal_configured = match self {
            Kind::Modal => modal_configured(),
            Kind::Local | Kind::Docker | Kind::Daytona => false,
        };
        self.unavailable_with(std::env::var_os(DAYTONA_API_KEY).is_some(), modal_configured)
    }

    fn unavailable_with(self, daytona_key: bool, modal_configured: bool) -> Option<String> {
        if let (false, Some(feature)) = (self.built(), self.feature()) {
            return Some(SandboxError::Unsupported { kind: self.name(), feature }.to_string());
        }
        if self == Kind::Daytona && !daytona_key {
            return Some(format!(
                "daytona sandboxes need the API key in {DAYTONA_API_KEY} (and DAYTONA_API_URL, \
                 DAYTONA_TARGET when not the defaults, as Daytona's own SDKs read them)"
            ));
        }
        if self == Kind::Modal && !modal_configured {
            return Some(format!(
                "modal sandboxes need a token: {MODAL_TOKENS} (or the active profile of ~/.modal.toml, \
                 as Modal's own SDKs read them; MODAL_SERVER_URL for another control plane)"
            ));
        }
        None
    }

    /// The cargo feature that brings this kind, if any.
    pub fn feature(self) -> Option<&'static str> {
        match self {
            Kind::Local => None,
            Kind::Docker => Some("docker"),
            Kind::Daytona => Some("daytona"),
            Kind::Modal => Some("modal"),
        }
    }
}

/// Whether Modal's token is configured (variables or config file), as its SDKs read it.
fn modal_configured() -> bool {
    #[cfg(feature = "modal")]
    return crate::adapters::modal::ModalConfig::from_env().is_ok();
    #[cfg(not(feature = "modal"))]
    return false;
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

/// The variable holding the Daytona API key, as Daytona's SDKs name it.
pub const DAYTONA_API_KEY: &str = "DAYTONA_API_KEY";
/// The variables holding Modal's token, as Modal's SDKs name them.
pub const MODAL_TOKENS: &str = "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET";

impl fmt::Display for SandboxSpec {
    /// The `KIND:SPEC` text it parses from.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SandboxSpec::Create { kind: Kind::Local, .. } => f.write_str("local"),
            SandboxSpec::Create { kind, source } => write!(f, "{kind}:{source}"),
            SandboxSpec::Attach { kind, id } => write!(f, "{kind}-attach:{id}"),
        }
    }
}

/// The accepted forms, for error messages and `--help`.
pub const SPEC_FORMS: &str = "local, docker:IMAGE, docker-attach:ID, daytona:SNAPSHOT_OR_IMAGE, \
     daytona-attach:ID, modal:IMAGE, modal-attach:SANDBOX_ID";

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
            "modal" => (Kind::Modal, false),
            "modal-attach" => (Kind::Modal, true),
            _ => return Err(invalid(&format!("unknown kind; expected one of {SPEC_FORMS}"))),
        };
        match (kind, attach) {
            (Kind::Local, _) if !rest.is_empty() => Err(invalid("`local` takes nothing after it")),
            (Kind::Local, _) => Ok(SandboxSpec::Create { kind, source: String::new() }),
            (_, true) if rest.is_empty() => Err(invalid("an id is needed after the colon")),
            (_, true) => Ok(SandboxSpec::Attach { kind, id: rest.to_owned() }),
            (Kind::Docker | Kind::Modal, false) if rest.is_empty() => {
                Err(invalid("an image is needed after the colon"))
            }
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

    /// Ends a sandbox this provider created for one use (what [`Opened::close`] does). Default:
    /// let go of the link, then [`remove`](Provider::remove) it by id.
    async fn close(&self, sandbox: Box<dyn BaseSandbox>) -> Result<()> {
        let id = sandbox.id().to_owned();
        drop(sandbox);
        self.remove(&id).await
    }
}

/// The provider of `kind`, or [`SandboxError::Unsupported`] when its feature is off in this build.
pub fn provider(kind: Kind) -> Result<Box<dyn Provider>> {
    match kind {
        Kind::Local => Ok(Box::new(crate::adapters::local::LocalProvider)),
        #[cfg(feature = "docker")]
        Kind::Docker => Ok(Box::new(crate::adapters::docker::DockerProvider::default())),
        #[cfg(not(feature = "docker"))]
        Kind::Docker => Err(SandboxError::Unsupported { kind: "docker", feature: "docker" }),
        #[cfg(feature = "daytona")]
        Kind::Daytona => Ok(Box::new(crate::adapters::daytona::DaytonaProvider::from_env()?)),
        #[cfg(not(feature = "daytona"))]
        Kind::Daytona => Err(SandboxError::Unsupported { kind: "daytona", feature: "daytona" }),
        #[cfg(feature = "modal")]
        Kind::Modal => Ok(Box::new(crate::adapters::modal::ModalProvider::from_env()?)),
        #[cfg(not(feature = "modal"))]
        Kind::Modal => Err(SandboxError::Unsupported { kind: "modal", feature: "modal" }),
    }
}

/// A sandbox [`open`] made or attached to.
pub struct Opened {
    pub sandbox: Box<dyn BaseSandbox>,
    /// Made for this use (a `KIND:SPEC` create), so [`Opened::close`] removes it; an attached one
    /// is left as it was.
    pub created: bool,
    provider: Box<dyn Provider>,
}

impl Opened {
    pub fn kind(&self) -> Kind {
        self.provider.kind()
    }

    /// Lets go of the sandbox, removing it when [`open`] created it.
    pub async fn close(self) -> Result<()> {
        if self.created { self.provider.close(self.sandbox).await } else { Ok(()) }
    }
}

/// Creates or attaches the sandbox `spec` names, through its kind's [`provider`].
pub async fn open(spec: &SandboxSpec) -> Result<Opened> {
    let kind = spec.kind();
    if let (false, Some(feature)) = (kind.built(), kind.feature()) {
        return Err(SandboxError::Unsupported { kind: kind.name(), feature });
    }
    // Configuration the kind needs (Daytona's API key, Modal's token), said before anything is tried.
    if let Some(why) = kind.unavailable() {
        return Err(SandboxError::InvalidSpec { spec: spec.to_string(), why });
    }
    let provider = provider(kind)?;
    let (sandbox, created) = match spec {
        SandboxSpec::Create { source, .. } => (provider.create(source).await?, true),
        SandboxSpec::Attach { id, .. } => (provider.attach(id).await?, false),
    };
    Ok(Opened { sandbox, created, provider })
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
            ("modal:agentd-base-debian:latest", create(Kind::Modal, "agentd-base-debian:latest")),
            ("modal-attach:sb-abc", attach(Kind::Modal, "sb-abc")),
        ];
        for (text, expected) in cases {
            assert_eq!(text.parse::<SandboxSpec>().unwrap(), expected, "{text}");
        }
        for bad in [
            "",
            "fly:x",
            "local:x",
            "docker",
            "docker:",
            "docker-attach:",
            "daytona-attach",
            "modal:",
            "modal-attach:",
        ] {
            let err = bad.parse::<SandboxSpec>().unwrap_err().to_string();
            assert!(err.contains(&format!("`{bad}`")), "{bad}: {err}");
        }
    }

    #[test]
    fn specs_print_as_they_parse() {
        for text in [
            "local",
            "docker:agentd-debian:latest",
            "docker-attach:3f2a",
            "daytona:",
            "daytona-attach:x",
            "modal:python:3.12",
            "modal-attach:sb-1",
        ] {
            assert_eq!(text.parse::<SandboxSpec>().unwrap().to_string(), text);
        }
        for kind in Kind::ALL {
            assert_eq!(Kind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(Kind::from_name("fly"), None);
    }

    /// Each kind is there exactly when its feature is on (this test runs with and without them:
    /// `cargo test -p agentd-host` and `--no-default-features`).
    #[test]
    fn kinds_follow_the_features() {
        assert_eq!(Kind::Docker.built(), cfg!(feature = "docker"));
        assert_eq!(Kind::Daytona.built(), cfg!(feature = "daytona"));
        assert!(Kind::Local.built() && Kind::Local.unavailable().is_none());
        assert!(provider(Kind::Local).is_ok());
        let docker = provider(Kind::Docker);
        assert_eq!(docker.is_ok(), cfg!(feature = "docker"));
        match docker {
            Ok(docker) => assert_eq!(docker.kind(), Kind::Docker),
            Err(err) => {
                assert_eq!(
                    err.to_string(),
                    "docker sandboxes need agentd-host built with the `docker` feature"
                );
                assert_eq!(Kind::Docker.unavailable(), Some(err.to_string()));
            }
        }
        // Without the feature, the feature is the reason whether or not the key is set.
        let daytona = Kind::Daytona.unavailable_with(true, false);
        assert_eq!(daytona.is_some(), !cfg!(feature = "daytona"), "{daytona:?}");
        let why = Kind::Daytona.unavailable_with(false, false).unwrap();
        let expected = if cfg!(feature = "daytona") { DAYTONA_API_KEY } else { "`daytona` feature" };
        assert!(why.contains(expected), "{why}");
        assert_eq!(Kind::Modal.built(), cfg!(feature = "modal"));
        let modal = Kind::Modal.unavailable_with(false, true);
        assert_eq!(modal.is_some(), !cfg!(feature = "modal"), "{modal:?}");
        let why = Kind::Modal.unavailable_with(false, false).unwrap();
        let expected =
            if cfg!(feature = "modal") { "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET" } else { "`modal` feature" };
        assert!(why.contains(expected), "{why}");
    }

    /// A spec of a kind that cannot be used fails before anything is created, with the reason.
    #[tokio::test]
    async fn opening_an_unavailable_kind_says_why() {
        if std::env::var_os(DAYTONA_API_KEY).is_some() {
            eprintln!("{DAYTONA_API_KEY} is set: daytona is usable here, nothing to check");
            return;
        }
        let spec: SandboxSpec = "daytona-attach:sb-1".parse().unwrap();
        let Err(err) = open(&spec).await else { panic!("opened a daytona sandbox") };
        let text = err.to_string();
        if cfg!(feature = "daytona") {
            assert!(text.starts_with("sandbox spec `daytona-attach:sb-1`: daytona sandboxes need"), "{text}");
            assert!(text.contains(DAYTONA_API_KEY), "{text}");
        } else {
            assert!(
                matches!(err, SandboxError::Unsupported { kind: "daytona", feature: "daytona" }),
                "{text}"
            );
        }
    }
}
