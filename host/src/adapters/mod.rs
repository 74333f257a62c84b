//! Implementations of [`BaseSandbox`](crate::contract::BaseSandbox), one module per kind of
//! sandbox, and what several of them share. Every linked sandbox is built on the core's
//! [`AgentdSandbox`](crate::contract::agentd::AgentdSandbox) and
//! [`OverAgentd`](crate::contract::agentd::OverAgentd). Each kind's module has its `Provider`
//! and its `KIND`; the kinds table (`provider::KINDS`) above lists them.
//!
//! - `docker` (feature `docker`): a container, agentd baked into its image or injected into it (Docker Engine API).
//! - `daytona` (feature `daytona`): a Daytona sandbox (REST API), agentd baked in or injected, linked
//!   through a preview URL, or driven through the toolbox exec when no link can be made.
//! - `modal` (feature `modal`): a Modal sandbox (gRPC API), agentd baked in or injected, linked
//!   through a tunnel, or driven through the command router's exec when there is no tunnel.
//! - `kubernetes` (feature `kubernetes`): a Pod or an agent-sandbox claim (Kubernetes API), agentd
//!   baked in or injected, linked through the `pods/exec` stream to `agentd bridge`.
//! - [`capped`]: bodies from a provider read with a cap
//!   ([`SandboxError::TooLarge`](crate::contract::error::SandboxError::TooLarge)),
//!   and the caps.
//! - `linked` (with any provider feature): `Linked`, what every provider whose
//!   sandboxes carry an agentd link shares (injection, the channel choice, the link, cleanup of a
//!   half-made sandbox, close, the contract); a provider implements `Machine`.
//! - `argv` (features `modal`, `kubernetes`): what providers share whose own exec runs an argv
//!   (Modal's command router, Kubernetes' `pods/exec`): `execute` and files through it.
//! - [`inject`]: what adapters that inject agentd share (the static binary).
//! - [`local`]: the embedded default: a private agentd child on loopback with a temporary workspace.

#[cfg(any(feature = "modal", feature = "kubernetes"))]
pub mod argv;
pub mod capped;
#[cfg(feature = "daytona")]
pub mod daytona;
#[cfg(feature = "docker")]
pub mod docker;
pub mod inject;
#[cfg(feature = "kubernetes")]
pub mod kubernetes;
#[cfg(any(feature = "daytona", feature = "modal", feature = "kubernetes"))]
pub mod linked;
pub mod local;
#[cfg(feature = "modal")]
pub mod modal;
