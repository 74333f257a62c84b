//! Implementations of [`BaseSandbox`](crate::BaseSandbox).
//!
//! - [`agentd`]: any running agentd, over the websocket link.
//! - [`local`]: the embedded default: a private agentd child on loopback with a temporary workspace.

pub mod agentd;
pub mod local;
