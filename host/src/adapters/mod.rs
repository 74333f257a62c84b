//! Implementations of [`BaseSandbox`](crate::BaseSandbox).
//!
//! - [`agentd`]: any running agentd, over the websocket link.
//! - [`docker`]: a container, agentd baked into its image or injected into it (Docker Engine API).
//! - [`local`]: the embedded default: a private agentd child on loopback with a temporary workspace.

pub mod agentd;
pub mod docker;
pub mod local;
