//! The file-verb conformance suite (`conformance/suite.rs`) on agentd baked into `agentd-busybox`.

#[path = "conformance/suite.rs"]
mod suite;

const BACKEND: suite::Backend = suite::Backend::Docker { image: "agentd-busybox:latest", inject: false };
