//! Core benchmark: prints figures, asserts nothing (this machine is noisy; ratios are measured
//! against a baseline taken in the same run).
//!
//! ```text
//! cargo build --release --workspace && cargo bench -p agentd-tests --bench core
//! ```
//! Uses the static agentd at `target/x86_64-unknown-linux-gnu/release/agentd` when it exists (see
//! README), else `target/release/agentd`.

// A benchmark binary: a failed step aborts it with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentd_host::{BaseSandbox, LocalSandbox};
use agentd_protocol::{ExecRequest, Offload};
use agentd_tests::stats::percentile;

const ROUND_TRIPS: usize = 2000;
const CAPTURE_RUNS: usize = 7;

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn agentd_path() -> PathBuf {
    let release = agentd_tests::binary("agentd");
    let target = release.parent().and_then(|p| p.parent()).expect("target dir");
    let static_bin = target.join("x86_64-unknown-linux-gnu/release/agentd");
    if static_bin.is_file() { static_bin } else { release }
}

fn main() {
    let agentd = agentd_path();
    // SAFETY: set before any thread starts.
    unsafe { std::env::set_var("AGENTD_BIN", &agentd) };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(run(agentd));
}

async fn run(agentd: PathBuf) {
    println!(
        "agentd binary: {} ({:.2} MiB)",
        agentd.display(),
        std::fs::metadata(&agentd).unwrap().len() as f64 / 1048576.0
    );
    // The core figure is agentd's own path: no sandbox profile (see the confined figure below).
    let sb = LocalSandbox::start_unconfined().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle_rss = agentd_tests::status_kb(sb.pid(), "VmRSS");
    println!("agentd idle RSS: {:.2} MiB", idle_rss as f64 / 1024.0);

    // Interleave the two measurements so drift on this machine hits both alike.
    let mut link_times = Vec::with_capacity(ROUND_TRIPS);
    let mut inside_times = Vec::with_capacity(ROUND_TRIPS);
    let mut spawn_times = Vec::with_capacity(ROUND_TRIPS);
    for _ in 0..100 {
        sb.execute("true", None).await.unwrap();
    }
    for _ in 0..ROUND_TRIPS {
        let start = Instant::now();
        let r = sb
            .agentd()
            .exec(ExecRequest { command: "true".into(), ..ExecRequest::default() }, None)
            .await
            .unwrap();
        link_times.push(start.elapsed());
        inside_times.push(Duration::from_secs_f64(r.duration));
        assert_eq!(r.exit_code, 0);
        let start = Instant::now();
        let status =
            Command::new("/bin/sh").args(["-c", "true"]).stdin(Stdio::null()).output().unwrap().status;
        spawn_times.push(start.elapsed());
        assert!(status.success());
    }
    link_times.sort();
    spawn_times.sort();
    let (lm, lp) = (percentile(&link_times, 0.5), percentile(&link_times, 0.99));
    let (sm, sp) = (percentile(&spawn_times, 0.5), percentile(&spawn_times, 0.99));
    println!(
        "exec `true` over the link: median {:.0} µs, p99 {:.0} µs ({ROUND_TRIPS} runs)",
        micros(lm),
        micros(lp)
    );
    inside_times.sort();
    println!(
        "  of which spawn to reap inside agentd: median {:.0} µs",
        micros(percentile(&inside_times, 0.5))
    );
    println!("raw spawn of /bin/sh -c true: median {:.0} µs, p99 {:.0} µs", micros(sm), micros(sp));
    println!(
        "ratio link/raw: median {:.2}x, p99 {:.2}x (target <= 1.15x)",
        micros(lm) / micros(sm),
        micros(lp) / micros(sp)
    );

    // The same round trip under the embedded default profile (fork + landlock + rlimits per command).
    let confined = LocalSandbox::start().await.unwrap();
    let mut confined_times = Vec::with_capacity(ROUND_TRIPS / 4);
    for _ in 0..ROUND_TRIPS / 4 {
        let start = Instant::now();
        confined.execute("true", None).await.unwrap();
        confined_times.push(start.elapsed());
    }
    confined_times.sort();
    let cm = percentile(&confined_times, 0.5);
    println!(
        "exec `true` under the default profile: median {:.0} µs ({:.2}x raw spawn)",
        micros(cm),
        micros(cm) / micros(sm)
    );
    drop(confined);

    let capture_path = sb.workspace().join("capture.bin").to_string_lossy().into_owned();
    let mut capture_times = Vec::new();
    let mut drain_times = Vec::new();
    for _ in 0..CAPTURE_RUNS {
        let start = Instant::now();
        let r = sb
            .agentd()
            .exec(
                ExecRequest {
                    command: "head -c 1073741824 /dev/zero".into(),
                    max_capture_bytes: Some(10 << 20),
                    offload: Some(Offload { capture_path: capture_path.clone(), inline_budget: 80_000 }),
                    ..ExecRequest::default()
                },
                None,
            )
            .await
            .unwrap();
        capture_times.push(start.elapsed());
        assert_eq!((r.total_bytes, r.capped), (1 << 30, true));
        let start = Instant::now();
        let status = Command::new("/bin/sh")
            .args(["-c", "head -c 1073741824 /dev/zero | cat > /dev/null"])
            .status()
            .unwrap();
        drain_times.push(start.elapsed());
        assert!(status.success());
    }
    capture_times.sort();
    drain_times.sort();
    let (c, d) = (capture_times[CAPTURE_RUNS / 2], drain_times[CAPTURE_RUNS / 2]);
    println!("1 GiB capture (10 MiB cap, offloaded): median {:.0} ms", c.as_secs_f64() * 1e3);
    println!("pipe drain `head -c 1G /dev/zero | cat > /dev/null`: median {:.0} ms", d.as_secs_f64() * 1e3);
    println!("ratio capture/drain: {:.2}x (target <= 0.8x)", c.as_secs_f64() / d.as_secs_f64());
    let peak = agentd_tests::status_kb(sb.pid(), "VmHWM");
    println!("agentd peak RSS after the captures: {:.2} MiB", peak as f64 / 1024.0);
}
