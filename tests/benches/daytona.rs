//! Daytona benchmark: prints figures, asserts nothing about speed. Through the fake Daytona
//! (`agentd_tests::fake_daytona`) on loopback, one sandbox from `agentd-base-debian` with agentd
//! injected, seen through two handles in the same run: one over the websocket link (preview proxy)
//! and one attached in `DaytonaMode::ToolboxExec` (every call a toolbox exec, the verbs derived
//! through it). Needs the Docker engine, the images from `images/build.sh` and the static agentd
//! (what is injected); without them it prints one `skipped:` line and exits 0.
//!
//! ```text
//! RUSTFLAGS="-C target-feature=+crt-static" cargo build --release -p agentd --target x86_64-unknown-linux-gnu
//! cargo build --release --workspace && cargo bench -p agentd-tests --bench daytona
//! ```

// A benchmark binary: a failed step aborts it with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use agentd_host::BaseSandbox;
use agentd_host::adapters::daytona::{Channel, DaytonaConfig, DaytonaMode, DaytonaOptions, DaytonaSandbox};
use agentd_tests::fake_daytona::FakeDaytona;
use agentd_tests::stats::{interleaved, ms, ratios};

const IMAGE: &str = "agentd-base-debian:latest";
const FILE: &str = "/tmp/bench/2000.txt";
/// Calls through the toolbox exec per figure (each is a `docker exec` behind the fake).
const TOOLBOX_RUNS: usize = 100;
/// Calls over the link per toolbox call: they are interleaved, so drift hits both alike.
const LINK_PER_TOOLBOX: usize = 5;

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(run());
}

async fn run() {
    if !agentd_tests::docker_available(IMAGE).await {
        return;
    }
    // The injected agentd: without it no link can be made, so there is nothing to compare.
    match agentd_host::adapters::inject::static_agentd() {
        Ok(path) if path.is_file() => {}
        Ok(path) => return eprintln!("skipped: daytona::main: no static agentd at {}", path.display()),
        Err(err) => return eprintln!("skipped: daytona::main: {err}"),
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

    let lines: String =
        (1..=2000).map(|i| format!("line {i} of the file, with some text after it\n")).collect();
    let up = linked.upload_files(&[(FILE.into(), lines.into_bytes())]).await.unwrap();
    assert_eq!(up[0].error, None);
    // Both paths give the same result (the conformance suite checks this case by case).
    let native = linked.read(FILE, 0, 2000).await.unwrap();
    assert_eq!(native, toolbox.read(FILE, 0, 2000).await.unwrap());
    assert_eq!(native.end_line, Some(2000));
    for _ in 0..20 {
        linked.execute("true", None).await.unwrap();
        linked.read(FILE, 0, 2000).await.unwrap();
    }
    for _ in 0..3 {
        toolbox.execute("true", None).await.unwrap();
    }

    let (exec_link, exec_toolbox) = interleaved(
        TOOLBOX_RUNS,
        LINK_PER_TOOLBOX,
        || async { assert_eq!(linked.execute("true", None).await.unwrap().exit_code, Some(0)) },
        || async { assert_eq!(toolbox.execute("true", None).await.unwrap().exit_code, Some(0)) },
    )
    .await;
    let (read_link, read_toolbox) = interleaved(
        TOOLBOX_RUNS,
        LINK_PER_TOOLBOX,
        || async { assert_eq!(linked.read(FILE, 0, 2000).await.unwrap().end_line, Some(2000)) },
        || async { assert_eq!(toolbox.read(FILE, 0, 2000).await.unwrap().end_line, Some(2000)) },
    )
    .await;

    println!("read of 2000 lines, native over the link: {}", read_link.line());
    println!("read of 2000 lines, derived through the toolbox exec: {}", read_toolbox.line());
    ratios("read", &read_link, &read_toolbox, " (target >= 10x)");
    println!("execute(\"true\") over the link: {}", exec_link.line());
    println!("execute(\"true\") through the toolbox exec: {}", exec_toolbox.line());
    ratios("execute", &exec_link, &exec_toolbox, "");

    toolbox.close().await.unwrap();
    linked.close().await.unwrap();
}
