//! Support for the end-to-end tests and benchmarks: a real agentd (started through
//! [`agentd_host::LocalSandbox`], or as a child process), a raw websocket client for malformed
//! input, and `/proc` helpers to check that nothing is left running. The fakes (Daytona, Modal,
//! Kubernetes, the lying agentd) are a crate of their own, `agentd-fakes` (`tests/fakes/`); this
//! crate's binaries (`fake-daytona`, `fake-modal`, `fake-kube`, `evil-agentd`) serve them standalone.
//!
//! ## Layout
//! Modules whose items the tests name from the root (`agentd_tests::Daemon`) are private and
//! re-exported here; the others are named by path (`agentd_tests::stats::median`).
//! - [`agentctl`]: agentctl as a child process, isolated from the machine's providers, its peak RSS
//!   measured.
//! - `binaries`: where the binaries under test are ([`binary`], [`static_agentd`],
//!   [`bench_agentd`]).
//! - `cgroup`: a pids cgroup as a ceiling for what a test starts ([`PidsCap`]).
//! - [`channels`]: what the provider benchmarks share: one sandbox through the link and through the
//!   provider's own exec channel.
//! - `checks`: checks any sandbox must pass ([`check_commands_and_verbs`], [`check_transfers`],
//!   [`check_per_file_codes`]).
//! - `daemon`: a real agentd as a child process, on TCP or a Unix socket ([`Daemon`]).
//! - `docker`: the engine and images or a visible skip ([`docker_available`]), containers and
//!   Docker sandboxes for tests ([`docker_sandbox`], [`RemoveOnDrop`]).
//! - `processes`: processes as `/proc` shows them ([`descendants`], [`status_kb`], …), signalling
//!   and stopping one ([`nix_pid`], [`sigterm_and_wait`]), and [`eventually`].
//! - `profiles`: a daemon serving a profile ([`profiled`]) and a command on it ([`run`]).
//! - `sandboxes`: sandboxes for the derived path ([`ShellSandbox`], [`ExecOnly`]).
//! - `scratch`: agentd's scratch directories ([`scratch_dir`], [`remove_scratch`]).
//! - `skip`: skips made visible ([`Need`], [`skip`], [`as_root`]).
//! - [`sources`]: the tree's Rust files read as text (their `mod` declarations), for the docs and
//!   layers checks.
//! - [`stats`]: medians and percentiles for the benchmarks.
//! - `swapper`: a thread that exchanges two names in a loop ([`Swapper`]).
//! - `websocket`: a raw websocket client ([`Ws`], [`raw_connect`], [`greeted`], [`ask`]).
//!
//! The tests need the `agentd` and `agentctl` binaries built: `cargo build --workspace` (the README's
//! test command does it first).

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test support: a failed setup step should abort the test with its message"
)]

pub mod agentctl;
mod binaries;
mod cgroup;
pub mod channels;
mod checks;
mod daemon;
mod docker;
mod processes;
mod profiles;
mod sandboxes;
mod scratch;
mod skip;
pub mod sources;
pub mod stats;
mod swapper;
mod websocket;

pub use binaries::{bench_agentd, binary, static_agentd};
pub use cgroup::{PidsCap, ThreadInCap, pids_below};
pub use checks::{check_commands_and_verbs, check_per_file_codes, check_transfers};
pub use daemon::Daemon;
pub use docker::{RemoveOnDrop, docker_available, docker_sandbox, plain_container};
pub use processes::{
    cpu_ticks, descendants, eventually, fd_count, nix_pid, processes_named, sigterm_and_wait, status_count,
    status_kb,
};
pub use profiles::{profiled, run};
pub use sandboxes::{ExecOnly, ShellSandbox};
pub use scratch::{remove_scratch, scratch_dir, scratch_dirs_in};
pub use skip::{Need, as_root, skip};
pub use swapper::Swapper;
pub use websocket::{Ws, ask, greeted, raw_connect, recv_json, send_text};
