//! The file-verb conformance suite (`conformance/suite.rs`) on agentd injected into a Debian container (`agentd-base-debian`).

#[path = "conformance/suite.rs"]
mod suite;

const BACKEND: suite::Backend = suite::Backend::Docker { image: "agentd-base-debian:latest", inject: true };
