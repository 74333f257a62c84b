//! Daytona benchmark: prints figures, asserts nothing about speed. Through the fake Daytona
//! (`agentd_fakes::fake_daytona`) on loopback, one sandbox from `agentd-base-debian` with agentd
//! injected, seen through two handles in the same run: one over the websocket link (preview proxy)
//! and one attached in `DaytonaMode::ToolboxExec` (every call a toolbox exec, the verbs derived
//! through it). Needs the Docker engine, the images from `images/build.sh` and the static agentd
//! (what is injected); without them it prints one `skipped:` line and exits 0.
//!
//! ```text
//! RUSTFLAGS="-C target-feature=+crt-static" cargo build --release -p agentd --target x86_64-unknown-linux-gnu
//! cargo build --release --workspace && cargo bench -p agentd-tests --bench daytona
//! ```

#![expect(clippy::unwrap_used, reason = "a benchmark binary: a failed step aborts it with its message")]

use std::time::{Duration, Instant};

use agentd_fakes::fake_daytona::FakeDaytona;
use agentd_host::BaseSandbox as _;
use agentd_host::adapters::daytona::{Channel, DaytonaConfig, DaytonaMode, DaytonaOptions, DaytonaSandbox};
use agentd_tests::stats::ms;

const IMAGE: &str = "agentd-base-debian:latest";
/// Calls through the toolbox exec per figure (each is a `docker exec` behind the fake).
const TOOLBOX_RUNS: usize = 100;

fn main() {
    agentd_tests::channels::main(run());
}

async fn run() {
    if !agentd_tests::channels::can_compare(IMAGE, "daytona::main").await {
        return;
    }
    let fake = FakeDaytona::start();
    let config = DaytonaConfig::new(fake.api_url(), fake.api_key());
    let options =
        |mode| DaytonaOptions { mode, link_timeout: Duration::from_secs(20), ..DaytonaOptions::default() };
    let start = Instant::now();
    let linked = DaytonaSandbox::create(config.clone(), IMAGE, &options(DaytonaMode::Link)).await.unwrap();
    println!("create + inject + link: {:.0} ms", ms(start.elapsed()));
    let toolbox =
        DaytonaSandbox::attach(config, linked.id(), &options(DaytonaMode::ToolboxExec)).await.unwrap();
    assert_eq!((linked.channel(), toolbox.channel()), (Channel::Link, Channel::ToolboxExec));
    agentd_tests::channels::compare(&linked, &toolbox, "toolbox exec", TOOLBOX_RUNS).await;
    toolbox.close().await.unwrap();
    linked.close().await.unwrap();
}
