//! The servers generated from `host/proto/modal/` (see `tests/build.rs`).

#![allow(clippy::all, clippy::pedantic, missing_docs)]

/// Package `modal.client`.
pub mod client {
    tonic::include_proto!("modal.client");
}

/// Package `modal.task_command_router`.
pub mod task_command_router {
    tonic::include_proto!("modal.task_command_router");
}
