//! Modal benchmark: prints figures, asserts nothing about speed. Through the fake Modal
//! (`agentd_fakes::fake_modal`) on loopback, one sandbox from `agentd-base-debian` with agentd
//! injected, seen through two handles in the same run: one over the websocket link (the tunnel)
//! and one attached in `ModalMode::RouterExec` (every call a command-router exec, the verbs derived
//! through it). Needs the Docker engine, the images from `images/build.sh` and the static agentd
//! (what is injected); without them it prints one `skipped:` line and exits 0.
//!
//! ```text
//! RUSTFLAGS="-C target-feature=+crt-static" cargo build --release -p agentd --target x86_64-unknown-linux-gnu
//! cargo build --release --workspace && cargo bench -p agentd-tests --bench modal
//! ```

#![expect(clippy::unwrap_used, reason = "a benchmark binary: a failed step aborts it with its message")]

use std::time::{Duration, Instant};

use agentd_fakes::fake_modal::FakeModal;
use agentd_host::BaseSandbox as _;
use agentd_host::adapters::modal::{Channel, ModalConfig, ModalMode, ModalOptions, ModalSandbox};
use agentd_tests::stats::ms;

const IMAGE: &str = "agentd-base-debian:latest";
/// Calls through the router exec per figure (each is a `docker exec` behind the fake).
const ROUTER_RUNS: usize = 100;

fn main() {
    agentd_tests::channels::main(run());
}

async fn run() {
    if !agentd_tests::channels::can_compare(IMAGE, "modal::main").await {
        return;
    }
    let fake = FakeModal::start();
    let config = ModalConfig::new(fake.server_url(), fake.token_id(), fake.token_secret());
    let options =
        |mode| ModalOptions { mode, link_timeout: Duration::from_secs(20), ..ModalOptions::default() };
    let start = Instant::now();
    let linked = ModalSandbox::create(config.clone(), IMAGE, &options(ModalMode::Link)).await.unwrap();
    println!("create + inject + link: {:.0} ms", ms(start.elapsed()));
    let router = ModalSandbox::attach(config, linked.id(), &options(ModalMode::RouterExec)).await.unwrap();
    assert_eq!((linked.channel(), router.channel()), (Channel::Link, Channel::RouterExec));
    agentd_tests::channels::compare(&linked, &router, "router exec", ROUTER_RUNS).await;
    router.close().await.unwrap();
    linked.close().await.unwrap();
}
