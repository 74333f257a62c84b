//! # agentd-host
//!
//! The host side of agentd: the `BaseSandbox` contract and its implementations.
//!
//! ## Layout
//! - [`sandbox`]: the [`BaseSandbox`] trait: four required members, the seven file verbs (through
//!   `fs`) and `execute_with_offload`, with defaults that need only the four.
//! - [`derived`]: the file verbs and the offload over any `execute` (`agentd fs` / `agentd exec`).
//! - [`link`]: the websocket client ([`Link`]): handshake, many requests in flight, streamed transfers;
//!   nothing agentd says is trusted (sizes, ids, shapes are checked).
//! - [`process`]: [`Process`], a kept process followed across link drops (`AgentdSandbox::spawn`,
//!   `AgentdSandbox::process`); the process verbs over one link are [`Link`]'s.
//! - [`download`]: a sandbox's file saved to a local path, nameless until whole.
//! - [`deadlines`]: how long the host waits on a sandbox ([`Deadlines`]); every wait ends.
//! - [`adapters`]: [`AgentdSandbox`] (any running agentd) and [`LocalSandbox`] (the embedded default);
//!   Docker (feature `docker`), Daytona (feature `daytona`), Modal (feature `modal`) and Kubernetes
//!   (feature `kubernetes`). A sandbox that wraps an `AgentdSandbox` implements [`OverAgentd`] (the
//!   link, plus what is its own: id, transfers) and gets the whole contract from it; a provider
//!   whose sandboxes carry a link it reaches through the provider (Daytona, Modal, Kubernetes)
//!   implements `adapters::linked::Machine` and is a `Linked<Machine>`. [`BaseSandbox::agentd`]
//!   hands the link to callers that want the protocol's extras.
//! - [`composite`]: [`CompositeSandbox`], path prefixes routed to other sandboxes (deepagents'
//!   `CompositeBackend`): `execute` on the default, `ls /`, `glob` and `grep` merged across routes.
//! - [`state`]: [`StateSandbox`], files in memory (deepagents' `StateBackend`): scratch space for a
//!   composite route such as `/state/`; no shell.
//! - [`provider`]: one shape for every kind: create from a `KIND:SPEC`, attach by id, list, remove
//!   ([`Provider`]; [`provider::provider`] per kind, [`provider::open`] for a spec in one call).
//! - [`error`]: [`SandboxError`], the transport failures; model-facing failures are values.
//! - [`untrusted`]: what comes from a provider or a sandbox is data: ids checked for their shape
//!   before use ([`check_id`]), text escaped before a person sees it ([`escape_controls`]).
//! - Result types are the protocol crate's ([`agentd_protocol::contract`]), re-exported here.
//!
//! The binary `agentctl` (in `src/bin/`) is the command line over the same pieces.
//!
//! ## Features
//! - `docker` (default): `DockerSandbox`, `DockerProvider` (bollard, tar).
//! - `daytona` (default): the Daytona sandbox and provider.
//! - `modal` (default): the Modal sandbox and provider (tonic; the `.proto` subset compiled by protox).
//! - `kubernetes` (default): the Kubernetes sandbox and provider (kube, k8s-openapi): Pods and
//!   agent-sandbox claims.
//! - `cli` (off by default): what only `agentctl` uses (clap, indicatif, the protocol's `cli`).
//!
//! Without the first four (`default-features = false`) the crate is the link, [`AgentdSandbox`],
//! [`LocalSandbox`], the derived path, the provider interface and the contract; kinds whose feature
//! is off parse in a spec and fail with [`SandboxError::Unsupported`]. `agentctl` needs all five:
//! `cargo install --path host --features cli`.
//!
//! ## Example
//! ```no_run
//! use agentd_host::{BaseSandbox, LocalSandbox};
//!
//! # async fn demo() -> agentd_host::Result<()> {
//! let sandbox = LocalSandbox::start().await?;
//! let result = sandbox.execute("echo hello; exit 3", None).await?;
//! assert_eq!((result.output.as_str(), result.exit_code), ("hello\n", Some(3)));
//! # Ok(()) }
//! ```

pub mod adapters;
pub mod composite;
pub mod deadlines;
pub mod derived;
pub mod download;
pub mod error;
pub mod link;
pub mod process;
pub mod provider;
pub mod sandbox;
pub mod state;
pub mod untrusted;

pub use adapters::agentd::{AgentdSandbox, OverAgentd};
pub use adapters::local::{LocalOptions, LocalSandbox};
pub use agentd_protocol::{ExecuteOffloadResult, ExecuteResponse, FileDownloadResponse, FileUploadResponse};
/// Re-exported so other crates can implement [`BaseSandbox`] with the same macro.
pub use async_trait::async_trait;
pub use composite::CompositeSandbox;
pub use deadlines::Deadlines;
pub use error::{Result, SandboxError};
pub use link::Link;
pub use process::Process;
pub use provider::{Kind, Provider, SandboxInfo, SandboxSpec};
pub use sandbox::BaseSandbox;
pub use state::StateSandbox;
pub use untrusted::{check_id, escape_controls};
