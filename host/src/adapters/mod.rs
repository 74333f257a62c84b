//! Implementations of [`BaseSandbox`](crate::BaseSandbox).
//!
//! - [`agentd`]: any running agentd, over the websocket link; [`agentd::OverAgentd`], the delegation
//!   every wrapper of a link uses.
//! - `docker` (feature `docker`): a container, agentd baked into its image or injected into it (Docker Engine API).
//! - [`local`]: the embedded default: a private agentd child on loopback with a temporary workspace.

pub mod agentd;
#[cfg(feature = "docker")]
pub mod docker;
pub mod local;
