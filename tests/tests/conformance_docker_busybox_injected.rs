//! The file-verb conformance suite (`conformance/suite.rs`) on agentd injected into a busybox container (`agentd-base-busybox`).

#[path = "conformance/suite.rs"]
mod suite;

const BACKEND: suite::Backend = suite::Backend::Docker { image: "agentd-base-busybox:latest", inject: true };
