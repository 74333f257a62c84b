//! The kinds table, above the adapters: which kinds of sandbox there are, each one row of
//! [`KINDS`] (its spec forms, cargo feature, provider, how `agentctl` shows it). A
//! [`Provider`] creates a sandbox from a spec, attaches to an
//! existing one by id, lists the ones agentd created and removes them. What it hands out is a
//! `Box<dyn BaseSandbox>`, so callers do not care which kind they got.
//!
//! Specs are `KIND:SPEC` strings ([`SandboxSpec`]), as `agentctl --sandbox` takes them:
//! `local`, `docker:IMAGE`, `docker-attach:ID`, `daytona:SNAPSHOT_OR_IMAGE`, `daytona-attach:ID`,
//! `modal:IMAGE`, `modal-attach:SANDBOX_ID`, `kube:IMAGE`, `kube-claim:WARM_POOL`,
//! `kube-attach:[NAMESPACE/]NAME` ([`spec_forms`]).
//! Kinds whose cargo feature is off parse, and fail with [`SandboxError::Unsupported`] when used.
//!
//! [`provider`] gives the provider of a kind; [`open`] turns a spec into a sandbox in one call.

use std::fmt;
use std::str::FromStr;

use crate::contract::BaseSandbox;
use crate::contract::error::{Result, SandboxError};
pub use crate::contract::provider::{Kind, Provider, SandboxInfo};

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

/// Makes the provider of a kind (from the environment, for those with credentials).
pub type MakeProvider = fn() -> Result<Box<dyn Provider>>;

/// One kind: its name, spec forms, cargo feature, its provider when built, how it is shown.
pub struct Row {
    pub kind: Kind,
    /// `(prefix, form)`, in the order `--help` lists them.
    pub forms: &'static [(&'static str, Form)],
    /// The cargo feature that brings it (`None`: always built).
    pub feature: Option<&'static str>,
    /// Its provider; `None` when its feature is off in this build.
    pub provider: Option<MakeProvider>,
    /// Why it cannot be used here even when built (its credentials are not set), if it cannot.
    pub missing: fn() -> Option<String>,
    /// `sandbox ls` shows ids cut to this many characters (Docker's, as `docker ps` does; `rm`
    /// takes prefixes).
    pub short_id: Option<usize>,
    /// What `agentctl status` calls a sandbox of this kind (`None`: the kind's name).
    pub noun: Option<&'static str>,
    /// Its sentence in `agentctl --sandbox`'s long help (`""`: none).
    pub help: &'static str,
}

fn nothing_missing() -> Option<String> {
    None
}

/// The kinds table: one row per kind. Adding a provider is one module in `adapters/`, one row here
/// and one cargo feature.
pub const KINDS: [Row; 5] = [
    Row {
        kind: Kind::new("local"),
        forms: &[("local", Form::Bare)],
        feature: None,
        provider: Some(|| Ok(Box::new(crate::adapters::local::LocalProvider))),
        missing: nothing_missing,
        short_id: None,
        noun: None,
        help: "local: a private local agentd for this command.",
    },
    Row {
        kind: Kind::new("docker"),
        forms: &[
            ("docker", Form::Create { what: "IMAGE", required: true, tag: "" }),
            ("docker-attach", Form::Attach { what: "ID" }),
        ],
        feature: Some("docker"),
        #[cfg(feature = "docker")]
        provider: Some(|| Ok(Box::new(crate::adapters::docker::DockerProvider::default()))),
        #[cfg(not(feature = "docker"))]
        provider: None,
        missing: nothing_missing,
        short_id: Some(12),
        noun: Some("container"),
        help: "docker:IMAGE: a container from an image, with its own agentd when its entrypoint is \
               agentd, else the static agentd injected.",
    },
    Row {
        kind: Kind::new("daytona"),
        forms: &[
            ("daytona", Form::Create { what: "SNAPSHOT_OR_IMAGE", required: false, tag: "" }),
            ("daytona-attach", Form::Attach { what: "ID" }),
        ],
        feature: Some("daytona"),
        #[cfg(feature = "daytona")]
        provider: Some(|| Ok(Box::new(crate::adapters::daytona::DaytonaProvider::from_env()?))),
        #[cfg(not(feature = "daytona"))]
        provider: None,
        #[cfg(feature = "daytona")]
        missing: crate::adapters::daytona::missing,
        #[cfg(not(feature = "daytona"))]
        missing: nothing_missing,
        short_id: None,
        noun: None,
        help: "daytona:SNAPSHOT_OR_IMAGE: a Daytona sandbox (needs DAYTONA_API_KEY).",
    },
    Row {
        kind: Kind::new("modal"),
        forms: &[
            ("modal", Form::Create { what: "IMAGE", required: true, tag: "" }),
            ("modal-attach", Form::Attach { what: "SANDBOX_ID" }),
        ],
        feature: Some("modal"),
        #[cfg(feature = "modal")]
        provider: Some(|| Ok(Box::new(crate::adapters::modal::ModalProvider::from_env()?))),
        #[cfg(not(feature = "modal"))]
        provider: None,
        #[cfg(feature = "modal")]
        missing: crate::adapters::modal::missing,
        #[cfg(not(feature = "modal"))]
        missing: nothing_missing,
        short_id: None,
        noun: None,
        help: "modal:IMAGE: a Modal sandbox (needs MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, or \
               ~/.modal.toml).",
    },
    Row {
        kind: Kind::new("kube"),
        forms: &[
            ("kube", Form::Create { what: "IMAGE", required: true, tag: "" }),
            ("kube-claim", Form::Create { what: "WARM_POOL", required: true, tag: "claim=" }),
            ("kube-attach", Form::Attach { what: "[NAMESPACE/]NAME" }),
        ],
        feature: Some("kubernetes"),
        #[cfg(feature = "kubernetes")]
        provider: Some(|| Ok(Box::new(crate::adapters::kubernetes::KubernetesProvider::default()))),
        #[cfg(not(feature = "kubernetes"))]
        provider: None,
        #[cfg(feature = "kubernetes")]
        missing: crate::adapters::kubernetes::missing,
        #[cfg(not(feature = "kubernetes"))]
        missing: nothing_missing,
        short_id: None,
        noun: None,
        help: "",
    },
];

/// What the table says about a kind: its row, and what follows from it.
impl Kind {
    /// Every kind, in the table's order.
    pub const ALL: [Kind; KINDS.len()] = {
        let mut all = [KINDS[0].kind; KINDS.len()];
        let mut i = 0;
        while i < KINDS.len() {
            all[i] = KINDS[i].kind;
            i += 1;
        }
        all
    };

    /// Its row of [`KINDS`] (every `Kind` comes from the table or an adapter that is in it).
    pub fn row(self) -> Option<&'static Row> {
        KINDS.iter().find(|row| row.kind == self)
    }

    /// The kind named `name` (`local`, `docker`, `daytona`, `modal`, `kube`).
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// Whether this build of agentd-host has this kind (its cargo feature is on).
    pub fn built(self) -> bool {
        self.row().is_some_and(|row| row.provider.is_some())
    }

    /// Why this kind cannot be used here, if it cannot: its feature is off, or (Daytona, Modal)
    /// its credentials are not set. Listing across kinds skips such kinds; opening one fails with
    /// this reason.
    pub fn unavailable(self) -> Option<String> {
        if let (false, Some(feature)) = (self.built(), self.feature()) {
            return Some(SandboxError::Unsupported { kind: self.name(), feature }.to_string());
        }
        self.row().and_then(|row| (row.missing)())
    }

    /// The cargo feature that brings this kind, if any.
    pub fn feature(self) -> Option<&'static str> {
        self.row().and_then(|row| row.feature)
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

impl fmt::Display for SandboxSpec {
    /// The `KIND:SPEC` text it parses from.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let forms = self.kind().row().map_or(&[][..], |row| row.forms);
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

/// The accepted forms, for error messages and `--help`: the forms of [`KINDS`], joined (`local,
/// docker:IMAGE, docker-attach:ID, …`).
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
            return Err(invalid(&format!("unknown kind; expected one of {}", spec_forms())));
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

/// The provider of `kind`, or [`SandboxError::Unsupported`] when its feature is off in this build.
pub fn provider(kind: Kind) -> Result<Box<dyn Provider>> {
    match kind.row().map(|row| (row.provider, row.feature)) {
        Some((Some(provider), _)) => provider(),
        Some((None, Some(feature))) => Err(SandboxError::Unsupported { kind: kind.name(), feature }),
        // Not reached: every kind is a row, and a row without a feature is always built.
        _ => Err(SandboxError::InvalidSpec { spec: kind.to_string(), why: "no such kind here".to_owned() }),
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

    fn kind(name: &str) -> Kind {
        Kind::from_name(name).unwrap()
    }

    #[test]
    fn specs_parse_into_kinds() {
        let create = |kind, source: &str| SandboxSpec::Create { kind, source: source.to_owned() };
        let attach = |kind, id: &str| SandboxSpec::Attach { kind, id: id.to_owned() };
        let cases = [
            ("local", create(kind("local"), "")),
            ("docker:agentd-base-debian:latest", create(kind("docker"), "agentd-base-debian:latest")),
            ("docker-attach:3f2a", attach(kind("docker"), "3f2a")),
            ("daytona:python:3.12-slim", create(kind("daytona"), "python:3.12-slim")),
            ("daytona:", create(kind("daytona"), "")),
            ("daytona-attach:sb-1", attach(kind("daytona"), "sb-1")),
            ("modal:agentd-base-debian:latest", create(kind("modal"), "agentd-base-debian:latest")),
            ("modal-attach:sb-abc", attach(kind("modal"), "sb-abc")),
            ("kube:agentd-debian:latest", create(kind("kube"), "agentd-debian:latest")),
            ("kube-claim:python-pool", create(kind("kube"), "claim=python-pool")),
            ("kube-attach:ns/agentd-1", attach(kind("kube"), "ns/agentd-1")),
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
            assert_eq!(kind.row().map(|row| row.kind), Some(kind));
            // The adapter names its kind as its row does.
            if let Ok(provider) = provider(kind) {
                assert_eq!(provider.kind(), kind);
            }
        }
        assert_eq!(
            spec_forms(),
            "local, docker:IMAGE, docker-attach:ID, daytona:SNAPSHOT_OR_IMAGE, daytona-attach:ID, \
             modal:IMAGE, modal-attach:SANDBOX_ID, kube:IMAGE, kube-claim:WARM_POOL, \
             kube-attach:[NAMESPACE/]NAME"
        );
        assert_eq!(Kind::from_name("fly"), None);
    }

    /// Each kind is there exactly when its feature is on (this test runs with and without them:
    /// `cargo test -p agentd-host` and `--no-default-features`).
    #[test]
    fn kinds_follow_the_features() {
        assert_eq!(kind("docker").built(), cfg!(feature = "docker"));
        assert_eq!(kind("daytona").built(), cfg!(feature = "daytona"));
        assert!(kind("local").built() && kind("local").unavailable().is_none());
        assert!(provider(kind("local")).is_ok());
        let docker = provider(kind("docker"));
        assert_eq!(docker.is_ok(), cfg!(feature = "docker"));
        match docker {
            Ok(docker) => assert_eq!(docker.kind(), kind("docker")),
            Err(err) => {
                assert_eq!(
                    err.to_string(),
                    "docker sandboxes need agentd-host built with the `docker` feature"
                );
                assert_eq!(kind("docker").unavailable(), Some(err.to_string()));
            }
        }
        // Without the feature, the feature is the reason whether or not the key is set.
        for kind in [kind("daytona"), kind("modal")] {
            let why = kind.unavailable();
            if !kind.built() {
                assert!(why.unwrap().contains(&format!("`{kind}` feature")));
            }
        }
        assert_eq!(kind("modal").built(), cfg!(feature = "modal"));
    }

    /// A spec of a kind that cannot be used fails before anything is created, with the reason.
    #[tokio::test]
    async fn opening_an_unavailable_kind_says_why() {
        const DAYTONA_API_KEY: &str = "DAYTONA_API_KEY";
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
