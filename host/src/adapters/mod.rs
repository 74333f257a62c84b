//! Implementations of [`BaseSandbox`](crate::BaseSandbox).
//!
//! - [`agentd`]: any running agentd, over the websocket link; [`agentd::OverAgentd`], the delegation
//!   every wrapper of a link uses.
//! - `docker` (feature `docker`): a container, agentd baked into its image or injected into it (Docker Engine API).
//! - `daytona` (feature `daytona`): a Daytona sandbox (REST API), agentd baked in or injected, linked
//!   through a preview URL, or driven through the toolbox exec when no link can be made.
//! - `modal` (feature `modal`): a Modal sandbox (gRPC API), agentd baked in or injected, linked
//!   through a tunnel, or driven through the command router's exec when there is no tunnel.
//! - [`capped`]: bodies from a provider read with a cap ([`SandboxError::TooLarge`](crate::SandboxError::TooLarge)),
//!   and the caps.
//! - [`inject`]: what adapters that inject agentd share (the static binary), and [`inject::AgentdSource`]:
//!   whether agentd was baked into a sandbox's image or injected.
//! - [`local`]: the embedded default: a private agentd child on loopback with a temporary workspace.

pub mod agentd;
pub mod capped;
#[cfg(feature = "daytona")]
pub mod daytona;
#[cfg(feature = "docker")]
pub mod docker;
pub mod inject;
pub mod local;
#[cfg(feature = "modal")]
pub mod modal;
