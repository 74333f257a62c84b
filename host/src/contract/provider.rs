//! What a provider is, apart from which providers there are: the [`Provider`] interface, the
//! [`Kind`] of sandbox it makes and the [`SandboxInfo`] it lists. The table of kinds (their spec
//! forms, features, providers) is the crate's `provider` module, above the adapters that implement
//! this.

use std::fmt;

use async_trait::async_trait;

use super::BaseSandbox;
use super::error::{Result, SandboxError};

/// A kind of sandbox, by its name (`local`, `docker`, `kube`, …). Each is one row of the kinds
/// table (`provider::KINDS`), which says everything else about it; its adapter names it with the
/// same word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Kind(&'static str);

impl Kind {
    /// The kind named `name`; only the kinds table and the adapters make one.
    pub(crate) const fn new(name: &'static str) -> Kind {
        Kind(name)
    }

    pub fn name(self) -> &'static str {
        self.0
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for Kind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
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

    /// Ends a sandbox this provider created for one use (what `provider::Opened::close` does). Default:
    /// let go of the link, then [`remove`](Provider::remove) it by id.
    async fn close(&self, sandbox: Box<dyn BaseSandbox>) -> Result<()> {
        let id = sandbox.id().to_owned();
        drop(sandbox);
        self.remove(&id).await
    }
}
