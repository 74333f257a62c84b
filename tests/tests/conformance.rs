//! The file-verb conformance suite (`conformance/suite.rs`) on the local agentd (LocalSandbox) and a local /bin/sh -c (ShellSandbox).

#[path = "conformance/suite.rs"]
mod suite;

const BACKEND: suite::Backend = suite::Backend::Local;
