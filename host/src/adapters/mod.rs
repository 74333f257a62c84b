//! Implementations of [`BaseSandbox`](crate::BaseSandbox).
//!
//! - [`agentd`]: any running agentd, over the websocket link.
//! - [`docker`]: a container, agentd baked into its image or injected into it (Docker Engine API).
//! - [`daytona`]: a Daytona sandbox (REST API), agentd baked in or injected, linked through a
//!   preview URL, or driven through the toolbox exec when no link can be made (feature `daytona`).
//! - [`inject`]: the static agentd that adapters copy into sandboxes without one.
//! - [`local`]: the embedded default: a private agentd child on loopback with a temporary workspace.

pub mod agentd;
#[cfg(feature = "daytona")]
pub mod daytona;
pub mod docker;
pub mod inject;
pub mod local;
