//! Modal's wire types and gRPC clients, generated at build time from `host/proto/modal/` (the
//! subset of Modal's `api.proto` and `task_command_router.proto` this adapter uses).

#![expect(
    clippy::all,
    clippy::pedantic,
    clippy::allow_attributes_without_reason,
    reason = "generated code, not ours to change"
)]

/// Package `modal.client`: the control plane (`ModalClient`).
pub mod client {
    tonic::include_proto!("modal.client");
}

/// Package `modal.task_command_router`: the command router (`TaskCommandRouter`).
pub mod task_command_router {
    tonic::include_proto!("modal.task_command_router");
}
