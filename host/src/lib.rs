//! # agentd-host
//!
//! The host side of agentd: the `BaseSandbox` contract and its implementations.
//!
//! ## Layout
//! Layers, each using only those above it in this list (no circle between modules):
//! - [`contract`], the core, with no adapter in it: the [`BaseSandbox`] trait (four required
//!   members, the seven file verbs through `fs`, `execute_with_offload` with an
//!   [`OffloadRequest`]) and what it names: [`SandboxError`], the id checks and the escaping of
//!   untrusted text, the derived path (the verbs and the offload over any `execute`), downloads,
//!   [`Deadlines`], the websocket [`Link`], [`AgentdSandbox`] (any running agentd) with
//!   [`OverAgentd`] (the delegation every wrapper of a link uses), [`Process`], [`AgentdSource`],
//!   and the [`Provider`] interface with its plain types ([`Kind`], [`SandboxInfo`]).
//! - [`composite`]: [`CompositeSandbox`], path prefixes routed to other sandboxes (deepagents'
//!   `CompositeBackend`): `execute` on the default, `ls /`, `glob` and `grep` merged across routes.
//!   It routes to any sandbox, a [`StateSandbox`] among them.
//! - [`state`]: [`StateSandbox`], files in memory (deepagents' `StateBackend`): scratch space for a
//!   composite route such as `/state/`; no shell.
//! - [`adapters`]: the sandboxes of each kind: [`LocalSandbox`] (the embedded default); Docker
//!   (feature `docker`), Daytona (feature `daytona`), Modal (feature `modal`) and Kubernetes
//!   (feature `kubernetes`); what they share (injection, capped bodies, argv exec, the `Linked`
//!   skeleton of a provider whose sandboxes carry a link).
//! - [`provider`]: the kinds table ([`provider::KINDS`]), one row per kind: create from a
//!   `KIND:SPEC`, attach by id, list, remove ([`provider::provider`] per kind, [`provider::open`]
//!   for a spec in one call).
//! - Result types are the protocol crate's ([`agentd_protocol::contract`]), re-exported here.
//!
//! The binary `agentctl` (in `src/bin/`) is the command line over the same pieces, on top.
//!
//! ## Adding a provider
//! One module (`adapters/NAME.rs`, declared in `adapters/mod.rs`, with its `Provider` and a
//! `KIND`), one row of [`provider::KINDS`] (its spec forms, feature, provider, and how `agentctl`
//! shows it: short ids, its noun, its `--sandbox` help sentence), and one cargo feature in
//! `Cargo.toml` (added to `agentctl`'s `required-features`). Its tests and docs are extra.
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
pub mod contract;
pub mod provider;
pub mod state;

pub use adapters::local::{LocalOptions, LocalSandbox};
pub use agentd_protocol::{ExecuteOffloadResult, ExecuteResponse, FileDownloadResponse, FileUploadResponse};
/// Re-exported so other crates can implement [`BaseSandbox`] with the same macro.
pub use async_trait::async_trait;
pub use composite::CompositeSandbox;
pub use contract::agentd::{AgentdSandbox, OverAgentd};
pub use contract::deadlines::Deadlines;
pub use contract::error::{Result, SandboxError};
pub use contract::escape::escape_controls;
pub use contract::link::Link;
pub use contract::process::Process;
pub use contract::provider::{Kind, Provider, SandboxInfo};
pub use contract::untrusted::check_id;
pub use contract::{AgentdSource, BaseSandbox, OffloadRequest};
pub use provider::SandboxSpec;
pub use state::StateSandbox;
