//! `ModalSandbox`: a Modal sandbox driven through Modal's gRPC API (`../shared/spec` provider facts
//! §A, §C), and `ModalProvider`, the same as a [`Provider`](crate::Provider).

pub mod proto;
