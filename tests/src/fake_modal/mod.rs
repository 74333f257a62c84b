//! A fake Modal: the control plane (`modal.client.ModalClient`) and the command router
//! (`modal.task_command_router.TaskCommandRouter`) as separate tonic listeners on loopback,
//! following `../shared/spec/provider-facts.md` §A4.

pub mod proto;
