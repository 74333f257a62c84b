//! The servers generated from `host/proto/modal/` (see `tests/fakes/build.rs`).

#![expect(
    clippy::all,
    clippy::allow_attributes,
    clippy::allow_attributes_without_reason,
    reason = "generated code: its style is prost's and tonic's"
)]

/// Package `modal.client`.
pub mod client {
    tonic::include_proto!("modal.client");
}

/// Package `modal.task_command_router`.
pub mod task_command_router {
    tonic::include_proto!("modal.task_command_router");
}
