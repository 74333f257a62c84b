//! One shape for every kind of sandbox: a [`Provider`] creates a sandbox from a spec, attaches to an
//! existing one by id, lists the ones agentd created and removes them. What it hands out is a
//! `Box<dyn BaseSandbox>`, so callers do not care which kind they got.
//!
//! Specs are `KIND:SPEC` strings ([`SandboxSpec`]), as `agentctl --sandbox` takes them:
//! `local`, `docker:IMAGE`, `docker-attach:ID`, `daytona:SNAPSHOT_OR_IMAGE`, `daytona-attach:ID`,
//! `modal:IMAGE`, `modal-attach:SANDBOX_ID`, `kube:IMAGE`, `kube-claim:WARM_POOL`,
//! `kube-attach:[NAMESPACE/]NAME`. Every kind is one row of [`KINDS`].
//! Kinds whose cargo feature is off parse, and fail with [`SandboxError::Unsupported`] when used.
//!
//! [`provider`] gives the provider of a kind; [`open`] turns a spec into a sandbox in one call.

use std::fmt;
use std::str::FromStr;

use async_trait::async_trait;

use crate::error::{Result, SandboxError};
use crate::sandbox::BaseSandbox;

/// The kinds of sandbox agentd-host knows. Everything else about a kind is its row in [`KINDS`].
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
    /// A Kubernetes Pod or agent-sandbox claim (feature `kubernetes`).
    Kubernetes,
}

/// How one spec form reads: `PREFIX` alone (`local`), `PREFIX:SOURCE` (a create), `PREFIX:ID` (an
/// attach).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Nothing after the prefix.
    Bare,
    /// Creates a sandbox; `what` names the part after the colon (`IMAGE`); `required`: it may not be
    /// empty; `tag` is put before it in [`SandboxSpec::Create`]'s `source` (another create form of
    /// the same kind, e.g. a claim from a template rather than an image).
    Create { what: &'static str, required: bool, tag: &'static str },
    /// Attaches to an existing sandbox by id.
    Attach { what: &'static str },
}

/// One kind: its name, spec forms, cargo feature, whether it is usable here, its provider.
pub struct Row {
    pub kind: Kind,
    pub name: &'static str,
    /// `(prefix, form)`, in the order `--help` lists them.
    pub forms: &'static [(&'static str, Form)],
    /// The cargo feature that brings it (`None`: always built).
    pub feature: Option<&'static str>,
    pub built: bool,
    /// `sandbox ls` shows ids cut to this many characters (Docker's, as `docker ps` does; `rm`
    /// takes prefixes).
    pub short_id: Option<usize>,
    /// Why it cannot be used here even when built (its credentials are not set), if it cannot.
    pub missing: fn() -> Option<String>,
    /// Its provider (only called when built).
    pub provider: fn() -> Result<Box<dyn Provider>>,
}

fn nothing_missing() -> Option<String> {
    None
}

/// A provider whose feature is off: never called ([`provider`] checks [`Row::built`] first).
#[allow(dead_code)]
fn not_built() -> Result<Box<dyn Provider>> {
    Err(SandboxError::Protocol("a provider of a kind this build does not have".to_owned()))
}

/// The kinds table: one row per kind, in [`Kind`]'s order. Adding a provider is one module, one
/// variant and one row here, and one cargo feature.
pub const KINDS: [Row; 5] = [
    Row {
        kind: Kind::Local,
        name: "local",
        forms: &[("local", Form::Bare)],
        feature: None,
        built: true,
        short_id: None,
        missing: nothing_missing,
        provider: || Ok(Box::new(crate::adapters::local::LocalProvider)),
    },
    Row {
        kind: Kind::Docker,
        name: "docker",
        forms: &[
            ("docker", Form::Create { what: "IMAGE", required: true, tag: "" }),
            ("docker-attach", Form::Attach { what: "ID" }),
        ],
        feature: Some("docker"),
        built: cfg!(feature = "docker"),
        short_id: Some(12),
        missing: nothing_missing,
        #[cfg(feature = "docker")]
        provider: || Ok(Box::new(crate::adapters::docker::DockerProvider::default())),
        #[cfg(not(feature = "docker"))]
        provider: not_built,
    },
    Row {
        kind: Kind::Daytona,
        name: "daytona",
        forms: &[
            ("daytona", Form::Create { what: "SNAPSHOT_OR_IMAGE", required: false, tag: "" }),
            ("daytona-attach", Form::Attach { what: "ID" }),
        ],
        feature: Some("daytona"),
        built: cfg!(feature = "daytona"),
        short_id: None,
        missing: || daytona_missing(std::env::var_os(DAYTONA_API_KEY).is_some()),
        #[cfg(feature = "daytona")]
        provider: || Ok(Box::new(crate::adapters::daytona::DaytonaProvider::from_env()?)),
        #[cfg(not(feature = "daytona"))]
        provider: not_built,
    },
    Row {
        kind: Kind::Modal,
        name: "modal",
        forms: &[
            ("modal", Form::Create { what: "IMAGE", required: true, tag: "" }),
            ("modal-attach", Form::Attach { what: "SANDBOX_ID" }),
        ],
        feature: Some("modal"),
        built: cfg!(feature = "modal"),
        short_id: None,
        missing: || modal_missing(modal_configured()),
        #[cfg(feature = "modal")]
        provider: || Ok(Box::new(crate::adapters::modal::ModalProvider::from_env()?)),
        #[cfg(not(feature = "modal"))]
        provider: not_built,
    },
    Row {
        kind: Kind::Kubernetes,
        name: "kube",
        forms: &[
            ("kube", Form::Create { what: "IMAGE", required: true, tag: "" }),
            ("kube-claim", Form::Create { what: "WARM_POOL", required: true, tag: "claim=" }),
            ("kube-attach", Form::Attach { what: "[NAMESPACE/]NAME" }),
        ],
        feature: Some("kubernetes"),
        built: cfg!(feature = "kubernetes"),
        short_id: None,
        missing: kube_missing,
        #[cfg(feature = "kubernetes")]
        provider: || Ok(Box::new(crate::adapters::kubernetes::KubernetesProvider::default())),
        #[cfg(not(feature = "kubernetes"))]
        provider: not_built,
    },
];

impl Kind {
    pub const ALL: [Kind; KINDS.len()] = {
        let mut all = [Kind::Local; KINDS.len()];
        let mut i = 0;
        while i < KINDS.len() {
            all[i] = KINDS[i].kind;
            i += 1;
        }
        all
    };

    /// Its row of [`KINDS`].
    pub fn row(self) -> &'static Row {
        &KINDS[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.row().name
    }

    /// The kind named `name` (`local`, `docker`, `daytona`, `modal`).
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// Whether this build of agentd-host has this kind (its cargo feature is on).
    pub fn built(self) -> bool {
        self.row().built
    }

    /// Why this kind cannot be used here, if it cannot: its feature is off, or (Daytona, Modal)
    /// its credentials are not set. Listing across kinds skips such kinds; opening one fails with
    /// this reason.
    pub fn unavailable(self) -> Option<String> {
        if let (false, Some(feature)) = (self.built(), self.feature()) {
            return Some(SandboxError::Unsupported { kind: self.name(), feature }.to_string());
        }
        (self.row().missing)()
    }

    /// The cargo feature that brings this kind, if any.
    pub fn feature(self) -> Option<&'static str> {
        self.row().feature
    }
}

fn daytona_missing(key_set: bool) -> Option<String> {
    (!key_set).then(|| {
        format!(
            "daytona sandboxes need the API key in {DAYTONA_API_KEY} (and DAYTONA_API_URL, \
             DAYTONA_TARGET when not the defaults, as Daytona's own SDKs read them)"
        )
    })
}

fn modal_missing(configured: bool) -> Option<String> {
    (!configured).then(|| {
        format!(
            "modal sandboxes need a token: {MODAL_TOKENS} (or the active profile of ~/.modal.toml, \
             as Modal's own SDKs read them; MODAL_SERVER_URL for another control plane)"
        )
    })
}

/// Why no cluster can be reached, when nothing `kubectl` would read is there: no `KUBECONFIG`, no
/// `~/.kube/config`, not in a Pod (`KUBERNETES_SERVICE_HOST`).
fn kube_missing() -> Option<String> {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    let home_config = std::env::var_os("HOME")
        .is_some_and(|home| std::path::Path::new(&home).join(".kube/config").is_file());
    (!set("KUBECONFIG") && !home_config && !set("KUBERNETES_SERVICE_HOST")).then(|| {
        "kube sandboxes need a cluster as kubectl finds it: KUBECONFIG, ~/.kube/config, or in-cluster \
         credentials"
            .to_owned()
    })
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
        let forms = self.kind().row().forms;
        match self {
            SandboxSpec::Create { source, .. } => {
                // The create form whose tag the source carries (the longest: "" matches every one).
                let found = forms
                    .iter()
                    .filter_map(|(prefix, form)| match form {
                        Form::Bare => Some((*prefix, "", None)),
                        Form::Create { tag, .. } => {
                            source.strip_prefix(tag).map(|rest| (*prefix, *tag, Some(rest)))
                        }
                        Form::Attach { .. } => None,
                    })
                    .max_by_key(|(_, tag, _)| tag.len());
                match found {
                    Some((prefix, _, None)) => f.write_str(prefix),
                    Some((prefix, _, Some(rest))) => write!(f, "{prefix}:{rest}"),
                    None => write!(f, "{}:{source}", self.kind()),
                }
            }
            SandboxSpec::Attach { kind, id } => {
                let prefix = forms.iter().find(|(_, form)| matches!(form, Form::Attach { .. }));
                match prefix {
                    Some((prefix, _)) => write!(f, "{prefix}:{id}"),
                    None => write!(f, "{kind}-attach:{id}"),
                }
            }
        }
    }
}

/// The accepted forms, for error messages and `--help` (the forms of [`KINDS`], joined; a test
/// keeps the two the same).
pub const SPEC_FORMS: &str = "local, docker:IMAGE, docker-attach:ID, daytona:SNAPSHOT_OR_IMAGE, \
     daytona-attach:ID, modal:IMAGE, modal-attach:SANDBOX_ID, kube:IMAGE, kube-claim:WARM_POOL, \
     kube-attach:[NAMESPACE/]NAME";

/// [`SPEC_FORMS`] as the table gives it.
pub fn spec_forms() -> String {
    let form = |(prefix, form): &(&str, Form)| match form {
        Form::Bare => (*prefix).to_owned(),
        Form::Create { what, .. } | Form::Attach { what } => format!("{prefix}:{what}"),
    };
    KINDS.iter().flat_map(|row| row.forms.iter().map(form)).collect::<Vec<_>>().join(", ")
}

impl FromStr for SandboxSpec {
    type Err = SandboxError;

    fn from_str(spec: &str) -> Result<Self> {
        let invalid = |why: &str| SandboxError::InvalidSpec { spec: spec.to_owned(), why: why.to_owned() };
        let (head, rest) = spec.split_once(':').unwrap_or((spec, ""));
        let found = KINDS.iter().find_map(|row| {
            row.forms.iter().find(|(prefix, _)| *prefix == head).map(|(_, form)| (row.kind, *form))
        });
        let Some((kind, form)) = found else {
            return Err(invalid(&format!("unknown kind; expected one of {SPEC_FORMS}")));
        };
        match form {
            Form::Bare if !rest.is_empty() => Err(invalid(&format!("`{head}` takes nothing after it"))),
            Form::Bare => Ok(SandboxSpec::Create { kind, source: String::new() }),
            Form::Attach { .. } if rest.is_empty() => Err(invalid("an id is needed after the colon")),
            Form::Attach { .. } => Ok(SandboxSpec::Attach { kind, id: rest.to_owned() }),
            Form::Create { what, required: true, .. } if rest.is_empty() => {
                Err(invalid(&format!("{} is needed after the colon", article(what))))
            }
            Form::Create { tag, .. } => Ok(SandboxSpec::Create { kind, source: format!("{tag}{rest}") }),
        }
    }
}

/// `IMAGE` → "an image", `TEMPLATE` → "a template": the spec part, in words.
fn article(what: &str) -> String {
    let word = what.to_lowercase().replace('_', " ");
    let an = word.starts_with(['a', 'e', 'i', 'o', 'u']);
    format!("{} {word}", if an { "an" } else { "a" })
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

    /// Suspends a sandbox, keeping it to [`resume`](Provider::resume) later. Default: this kind
    /// cannot ([`SandboxError::NotSupported`]).
    async fn pause(&self, id: &str) -> Result<()> {
        let _ = id;
        Err(SandboxError::NotSupported { kind: self.kind().name(), operation: "pause" })
    }

    /// Resumes a sandbox [`pause`](Provider::pause) suspended, and waits until it is ready again.
    async fn resume(&self, id: &str) -> Result<()> {
        let _ = id;
        Err(SandboxError::NotSupported { kind: self.kind().name(), operation: "resume" })
    }

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
    let row = kind.row();
    match (row.built, row.feature) {
        (false, Some(feature)) => Err(SandboxError::Unsupported { kind: row.name, feature }),
        _ => (row.provider)(),
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
            ("kube:agentd-debian:latest", create(Kind::Kubernetes, "agentd-debian:latest")),
            ("kube-claim:python-pool", create(Kind::Kubernetes, "claim=python-pool")),
            ("kube-attach:ns/agentd-1", attach(Kind::Kubernetes, "ns/agentd-1")),
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
            "kube:",
            "kube-claim:",
            "kube-attach:",
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
            "kube:python:3.12",
            "kube-claim:pool",
            "kube-attach:default/agentd-1",
        ] {
            assert_eq!(text.parse::<SandboxSpec>().unwrap().to_string(), text);
        }
        for kind in Kind::ALL {
            assert_eq!(Kind::from_name(kind.name()), Some(kind));
            assert_eq!(kind.row().kind, kind, "KINDS is in Kind's order");
        }
        assert_eq!(spec_forms(), SPEC_FORMS);
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
        for kind in [Kind::Daytona, Kind::Modal] {
            let why = kind.unavailable();
            if !kind.built() {
                assert!(why.unwrap().contains(&format!("`{kind}` feature")));
            }
        }
        assert_eq!(daytona_missing(true), None);
        assert!(daytona_missing(false).unwrap().contains(DAYTONA_API_KEY));
        assert_eq!(Kind::Modal.built(), cfg!(feature = "modal"));
        assert_eq!(modal_missing(true), None);
        assert!(modal_missing(false).unwrap().contains("MODAL_TOKEN_ID and MODAL_TOKEN_SECRET"));
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
