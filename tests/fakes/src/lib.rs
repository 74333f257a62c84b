//! The tests' fakes: the providers (Daytona, Modal, Kubernetes) as servers on loopback whose
//! sandboxes are real Docker containers, and an agentd that lies. The end-to-end tests
//! (`agentd-tests`) drive them in process, and its binaries (`fake-daytona`, `fake-modal`,
//! `fake-kube`, `evil-agentd`) serve them standalone for the Python tests and by hand.
//!
//! ## Layout
//! - [`containers`]: the fake providers' sandboxes as Docker containers, driven by the `docker` CLI.
//! - [`evil_agentd`]: an agentd that lies, for the tests of a hostile sandbox (`evil-agentd`).
//! - [`fake_daytona`]: a fake Daytona (API, toolbox, preview proxy; `fake-daytona`).
//! - [`fake_kube`]: a fake Kubernetes API server (discovery, objects, watch, Pods as containers,
//!   exec over websockets; `fake-kube`).
//! - [`fake_modal`]: a fake Modal (control plane and command router over gRPC; `fake-modal`); its
//!   servers are compiled by `build.rs` from the `.proto` subset in `host/proto/`.
//! - `random`: [`random_hex`], the fakes' ids and tokens.
//! - `server`: [`ServerThread`], a fake's own thread and runtime, and [`until_terminated`], what a
//!   fake's binary serves until.

pub mod containers;
pub mod evil_agentd;
pub mod fake_daytona;
pub mod fake_kube;
pub mod fake_modal;
mod random;
mod server;

pub use random::random_hex;
pub use server::{ServerThread, until_terminated};
