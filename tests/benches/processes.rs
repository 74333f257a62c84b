//! Processes benchmark: prints figures, asserts nothing (every ratio is against a baseline measured
//! in the same run, interleaved).
//!
//! ```text
//! cargo build --release --workspace && cargo bench -p agentd-tests --bench processes
//! ```
//!
//! What it prints:
//! 1. the round trip of `exec true` kept (`keep`: a journal file, a process id, a retained result)
//!    next to the same exec not kept, in turns; the difference as a share of the round trip
//!    (target: under 5 %);
//! 2. `attach` and replay of a 10 MiB journal next to a `download` of the same 10 MiB from a file;
//! 3. the round trip of a `write_stdin` to `cat` until its echo comes back as output, next to an
//!    `exec true`;
//! 4. with `AGENTD_BASELINE=PATH` (an agentd built from an earlier commit), `exec true` on this
//!    agentd next to the same on that one, in turns: what the process table costs every exec.

#![expect(clippy::unwrap_used, reason = "a benchmark binary: a failed step aborts it with its message")]

use std::time::{Duration, Instant};

use agentd_host::LocalSandbox;
use agentd_host::contract::link::{Link, ProcessEvent};
use agentd_protocol::{ExecRequest, StdinMode};
use agentd_tests::stats::percentile;

const ROUND_TRIPS: usize = 2000;
const REPLAYS: usize = 20;
const ECHOES: usize = 2000;
const REPLAY_BYTES: u64 = 10 << 20;

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn summary(times: &mut [Duration]) -> (f64, f64) {
    times.sort();
    (micros(percentile(times, 0.5)), micros(percentile(times, 0.99)))
}

fn main() {
    let release = agentd_tests::binary("agentd");
    // SAFETY: set before any thread starts.
    unsafe { std::env::set_var("AGENTD_BIN", &release) };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(run());
}

async fn run() {
    let sandbox = LocalSandbox::start_unconfined().await.unwrap();
    let link = sandbox.agentd().link().await.unwrap();
    keep_cost(&link).await;
    println!();
    replay(&link, sandbox.workspace()).await;
    println!();
    echo(&link).await;
    if let Some(baseline) = std::env::var_os("AGENTD_BASELINE") {
        println!();
        against_baseline(&link, std::path::PathBuf::from(baseline)).await;
    }
}

async fn against_baseline(link: &Link, baseline: std::path::PathBuf) {
    // SAFETY: the runtime is single-threaded and nothing else reads the environment now.
    unsafe { std::env::set_var("AGENTD_BIN", &baseline) };
    let other = LocalSandbox::start_unconfined().await.unwrap();
    let before = other.agentd().link().await.unwrap();
    for _ in 0..100 {
        timed_true(link, None).await;
        timed_true(&before, None).await;
    }
    let (mut now, mut then) = (Vec::with_capacity(ROUND_TRIPS), Vec::with_capacity(ROUND_TRIPS));
    for i in 0..ROUND_TRIPS {
        if i % 2 == 0 {
            now.push(timed_true(link, None).await);
            then.push(timed_true(&before, None).await);
        } else {
            then.push(timed_true(&before, None).await);
            now.push(timed_true(link, None).await);
        }
    }
    let (now_median, now_p99) = summary(&mut now);
    let (then_median, then_p99) = summary(&mut then);
    println!("exec true (not kept), {ROUND_TRIPS} of each in turns, this agentd and {}:", baseline.display());
    println!("  this agentd               median {now_median:8.1} µs   p99 {now_p99:8.1} µs");
    println!("  baseline                  median {then_median:8.1} µs   p99 {then_p99:8.1} µs");
    println!("  this / baseline: {:.3}x", now_median / then_median);
}

async fn timed_true(link: &Link, keep: Option<f64>) -> Duration {
    let request = ExecRequest { command: "true".into(), keep, ..ExecRequest::default() };
    let start = Instant::now();
    let result = link.exec(request, None).await.unwrap();
    let took = start.elapsed();
    assert_eq!(result.exit_code, 0);
    took
}

async fn keep_cost(link: &Link) {
    for _ in 0..100 {
        timed_true(link, None).await;
        timed_true(link, Some(0.0)).await;
    }
    let (mut plain, mut kept) = (Vec::with_capacity(ROUND_TRIPS), Vec::with_capacity(ROUND_TRIPS));
    for i in 0..ROUND_TRIPS {
        // Each kind goes first half the time.
        if i % 2 == 0 {
            plain.push(timed_true(link, None).await);
            kept.push(timed_true(link, Some(0.0)).await);
        } else {
            kept.push(timed_true(link, Some(0.0)).await);
            plain.push(timed_true(link, None).await);
        }
    }
    let (plain_median, plain_p99) = summary(&mut plain);
    let (kept_median, kept_p99) = summary(&mut kept);
    println!("exec true, {ROUND_TRIPS} of each in turns (unconfined local agentd):");
    println!("  not kept                  median {plain_median:8.1} µs   p99 {plain_p99:8.1} µs");
    println!("  kept (keep: 0)            median {kept_median:8.1} µs   p99 {kept_p99:8.1} µs");
    println!(
        "  cost of keep: {:+.1} µs, {:+.1} % of the round trip (target < 5 %)",
        kept_median - plain_median,
        (kept_median - plain_median) / plain_median * 100.0
    );
}

async fn replay(link: &Link, workspace: &std::path::Path) {
    // The same bytes in a kept process's journal and in a file.
    let command = format!("head -c {REPLAY_BYTES} /dev/urandom | tee replay.bin");
    let request = ExecRequest {
        command,
        max_capture_bytes: Some(REPLAY_BYTES),
        stream: true,
        ..ExecRequest::default()
    };
    let mut spawned = link.spawn(request).await.unwrap();
    let process = spawned.process.clone();
    while let Some(event) = spawned.next().await.unwrap() {
        if let ProcessEvent::Ended(result) = event {
            assert_eq!(result.total_bytes, REPLAY_BYTES);
        }
    }
    let path = workspace.join("replay.bin").to_string_lossy().into_owned();
    let (mut attached, mut downloaded) = (Vec::new(), Vec::new());
    for _ in 0..REPLAYS {
        let mut got = 0u64;
        let mut count = |data: &[u8]| got += data.len() as u64;
        let start = Instant::now();
        link.attach(&process, 0, Some(&mut count), None).await.unwrap();
        attached.push(start.elapsed());
        assert_eq!(got, REPLAY_BYTES);
        let start = Instant::now();
        let done = link.download(&path, tokio::io::sink(), |_, _| {}).await.unwrap().unwrap();
        downloaded.push(start.elapsed());
        assert_eq!(done.size, REPLAY_BYTES);
    }
    let (attach_median, attach_p99) = summary(&mut attached);
    let (download_median, download_p99) = summary(&mut downloaded);
    println!("10 MiB, {REPLAYS} of each in turns:");
    println!(
        "  attach and replay the journal  median {:8.2} ms   p99 {:8.2} ms",
        attach_median / 1e3,
        attach_p99 / 1e3
    );
    println!(
        "  download of the same file      median {:8.2} ms   p99 {:8.2} ms",
        download_median / 1e3,
        download_p99 / 1e3
    );
    println!("  attach / download: {:.2}x", attach_median / download_median);
}

async fn echo(link: &Link) {
    let request = ExecRequest {
        command: "cat".into(),
        stdin: Some(StdinMode::Pipe),
        stream: true,
        ..ExecRequest::default()
    };
    let mut cat = link.spawn(request).await.unwrap();
    let process = cat.process.clone();
    let (mut echoes, mut execs) = (Vec::with_capacity(ECHOES), Vec::with_capacity(ECHOES));
    for _ in 0..ECHOES {
        let start = Instant::now();
        link.write_stdin(&process, b"ping\n").await.unwrap();
        let mut got = Vec::new();
        while got.len() < 5 {
            match cat.next().await.unwrap() {
                Some(ProcessEvent::Output(data)) => got.extend_from_slice(&data),
                other => panic!("{other:?}"),
            }
        }
        echoes.push(start.elapsed());
        execs.push(timed_true(link, None).await);
    }
    link.close_stdin(&process).await.unwrap();
    let (echo_median, echo_p99) = summary(&mut echoes);
    let (exec_median, exec_p99) = summary(&mut execs);
    println!("write_stdin to cat until its echo comes back, {ECHOES} of each in turns:");
    println!("  write_stdin -> echo        median {echo_median:8.1} µs   p99 {echo_p99:8.1} µs");
    println!("  exec true                  median {exec_median:8.1} µs   p99 {exec_p99:8.1} µs");
}
