//! Core benchmark: prints figures, asserts nothing (this machine is noisy; every ratio is against a
//! baseline measured in the same run).
//!
//! ```text
//! cargo build --release --workspace && cargo bench -p agentd-tests --bench core
//! ```
//! Names after `--` run only those parts (`round`, `quiet`, `throughput`, `cpu`, `latency`,
//! `capture`, `transfer`), e.g.
//! `cargo bench -p agentd-tests --bench core -- round`; the sizes are printed always.
//!
//! Uses the static agentd at `target/x86_64-unknown-linux-gnu/release/agentd` when it exists (see
//! docs/building.md), else `target/release/agentd`.
//!
//! What it prints, in order:
//! 1. the round trip of `true`, unconfined, under the embedded default profile and under it with
//!    `network = "deny"` (a per-exec override: its seccomp filter), next to a raw spawn of
//!    `/bin/sh -c true` and to the link's own round trip (interleaved in turns, so drift and the
//!    order hit them alike);
//! 2. the same round trips (and raw spawns) each after 50 ms of quiet, as an agent's commands come;
//! 3. throughput with 1, 8, 64 and 256 `true` execs in flight, over one link and over 8 links, next to
//!    the same number of threads each spawning `/bin/sh -c true` in a loop, measured just before
//!    (in rounds, each kind in each place in turn; the median ratio is shown with its range);
//! 4. the CPU time per exec of agentd and of its children, next to raw spawns' (their threads' and
//!    their children's), and how much of the time the machine was idle;
//! 5. the latency of `true` while another exec writes 1 GiB to its capture, next to its idle latency;
//! 6. a 1 GiB capture next to `head -c 1G /dev/zero | cat > /dev/null`, next to the same `head` into
//!    a reader that splices the pipe to /dev/null with blocking calls, and next to the floor: that
//!    reader trying an empty pipe again for 20 µs before it sleeps (this binary, run as the readers);
//! 7. an upload and a download of 256 MiB over the link, next to the sha256 of the same bytes (each
//!    end hashes everything it moves);
//! 8. agentd's binary size, idle RSS and peak RSS.

#![expect(clippy::unwrap_used, reason = "a benchmark binary: a failed step aborts it with its message")]

use std::os::fd::AsFd as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agentd_host::{AgentdSandbox, LocalSandbox};
use agentd_protocol::profile::{Network, ProfileOverride};
use agentd_protocol::{ExecRequest, Offload};
use agentd_tests::stats::{median, percentile};

const ROUND_TRIPS: usize = 2000;

/// Round trips of each kind after a quiet spell, and the spell (longer than an RCU grace period
/// here, 15–23 ms).
const QUIET_ROUND_TRIPS: usize = 100;
const QUIET_SPELL: Duration = Duration::from_millis(50);
const CAPTURE_RUNS: usize = 5;
const IN_FLIGHT: [usize; 4] = [1, 8, 64, 256];
/// Throughput is measured in rounds of pairs (raw spawns, then agentd) and the ratios' median shown:
/// one pass of a few hundred execs swung by ±15 % on this machine.
const THROUGHPUT_ROUNDS: usize = 5;
const LINKS: usize = 8;
const LATENCY_SAMPLES: usize = 1000;
const GIB: u64 = 1 << 30;
const TRANSFER_BYTES: u64 = 256 << 20;
const TRANSFER_RUNS: usize = 5;

/// First argument that makes this binary the floor's pipe reader instead of the benchmark.
const SPLICE_READER: &str = "--splice-stdin-to-null";

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some(SPLICE_READER) {
        splice_stdin_to_null(&std::env::args().nth(2).unwrap_or_default());
        return;
    }
    let agentd = agentd_tests::bench_agentd();
    // SAFETY: set before any thread starts.
    unsafe { std::env::set_var("AGENTD_BIN", &agentd) };
    // cargo passes `--bench`; every other argument names a part.
    let parts: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(run(agentd, &parts));
}

async fn run(agentd: PathBuf, parts: &[String]) {
    let part = |name: &str| parts.is_empty() || parts.iter().any(|p| p == name);
    println!(
        "agentd binary: {} ({:.2} MiB, target <= 8 MiB)",
        agentd.display(),
        std::fs::metadata(&agentd).unwrap().len() as f64 / 1048576.0
    );
    let unconfined = LocalSandbox::start_unconfined().await.unwrap();
    let confined = LocalSandbox::start().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle_rss = agentd_tests::status_kb(unconfined.pid(), "VmRSS");
    println!("agentd idle RSS: {:.2} MiB (target <= 4 MiB)", idle_rss as f64 / 1024.0);

    if part("round") {
        round_trips(&unconfined, &confined).await;
        println!();
    }
    if part("quiet") {
        after_quiet_spells(&unconfined, &confined).await;
        println!();
    }
    if part("throughput") {
        throughput(&unconfined, &confined).await;
        println!();
    }
    if part("cpu") {
        cpu_per_exec(&unconfined, &confined).await;
        println!();
    }
    if part("latency") {
        latency_beside_a_capture(&confined).await;
        println!();
    }
    if part("capture") {
        capture(&unconfined).await;
        println!();
    }
    if part("transfer") {
        transfer(&unconfined).await;
        println!();
    }
    let peak = agentd_tests::status_kb(unconfined.pid(), "VmHWM");
    println!("agentd peak RSS after the captures: {:.2} MiB", peak as f64 / 1024.0);
}

/// One `true` over the link, checked: the round trip, and agentd's own spawn-to-reap time.
async fn timed_true(sb: &AgentdSandbox) -> (Duration, Duration) {
    timed(sb, ExecRequest { command: "true".into(), ..ExecRequest::default() }).await
}

/// `true` with the server's profile tightened to `network = "deny"` for this exec (the seccomp
/// filter is installed in each command).
fn offline_true() -> ExecRequest {
    let profile = ProfileOverride { network: Some(Network::Deny), ..ProfileOverride::default() };
    ExecRequest { command: "true".into(), profile: Some(Box::new(profile)), ..ExecRequest::default() }
}

/// `request` over the link, checked: the round trip, and agentd's own spawn-to-reap time.
async fn timed(sb: &AgentdSandbox, request: ExecRequest) -> (Duration, Duration) {
    let start = Instant::now();
    let r = sb.exec(request, None).await.unwrap();
    let took = start.elapsed();
    assert_eq!(r.exit_code, 0, "{r:?}");
    (took, Duration::from_secs_f64(r.duration))
}

/// The round trip of one `true` over the link.
async fn exec_true(sb: &AgentdSandbox) -> Duration {
    timed_true(sb).await.0
}

/// One raw spawn of `/bin/sh -c true` with its output captured, as agentd captures it.
fn raw_spawn() -> Duration {
    let start = Instant::now();
    let status = Command::new("/bin/sh").args(["-c", "true"]).stdin(Stdio::null()).output().unwrap().status;
    let took = start.elapsed();
    assert!(status.success());
    took
}

fn summary(times: &mut [Duration]) -> (f64, f64) {
    times.sort();
    (micros(percentile(times, 0.5)), micros(percentile(times, 0.99)))
}

async fn round_trips(unconfined: &LocalSandbox, confined: &LocalSandbox) {
    for _ in 0..100 {
        exec_true(unconfined.agentd()).await;
        exec_true(confined.agentd()).await;
    }
    let mut over_link = Vec::with_capacity(ROUND_TRIPS);
    let mut inside = Vec::with_capacity(ROUND_TRIPS);
    let mut profiled = Vec::with_capacity(ROUND_TRIPS);
    let mut profiled_inside = Vec::with_capacity(ROUND_TRIPS);
    let (mut offline, mut offline_inside) =
        (Vec::with_capacity(ROUND_TRIPS), Vec::with_capacity(ROUND_TRIPS));
    let mut raw = Vec::with_capacity(ROUND_TRIPS);
    let mut nothing = Vec::with_capacity(ROUND_TRIPS);
    let links = [unconfined.agentd().link().await.unwrap(), confined.agentd().link().await.unwrap()];
    // Each kind takes each place in the order equally often: what ran just before a measurement (a
    // raw spawn, an exec on the other agentd, a request on the same one) moved a median by ~50 µs.
    for i in 0..ROUND_TRIPS {
        for kind in 0..5 {
            match (i + kind) % 5 {
                0 => {
                    // The link's own round trip: a request agentd answers at once (a cancel of
                    // nothing), on each link in turn (a request just before an exec speeds it up).
                    let start = Instant::now();
                    assert!(!links[i % 2].cancel(u64::MAX).await.unwrap());
                    nothing.push(start.elapsed());
                }
                1 => {
                    let (took, within) = timed_true(unconfined.agentd()).await;
                    over_link.push(took);
                    inside.push(within);
                }
                2 => {
                    let (took, within) = timed_true(confined.agentd()).await;
                    profiled.push(took);
                    profiled_inside.push(within);
                }
                3 => {
                    let (took, within) = timed(confined.agentd(), offline_true()).await;
                    offline.push(took);
                    offline_inside.push(within);
                }
                _ => raw.push(raw_spawn()),
            }
        }
    }
    let (lm, lp) = summary(&mut over_link);
    let (nm, np) = summary(&mut nothing);
    let (im, _) = summary(&mut inside);
    let (pm, pp) = summary(&mut profiled);
    let (pim, _) = summary(&mut profiled_inside);
    let (om, op) = summary(&mut offline);
    let (oim, _) = summary(&mut offline_inside);
    let (rm, rp) = summary(&mut raw);
    println!("round trip of `true` ({ROUND_TRIPS} runs each, interleaved in turns):");
    println!("  raw spawn of /bin/sh -c true:  median {rm:.0} µs, p99 {rp:.0} µs");
    println!("  the link alone (a cancel of nothing): median {nm:.0} µs, p99 {np:.0} µs");
    println!(
        "  over the link, unconfined:     median {lm:.0} µs, p99 {lp:.0} µs ({:.2}x raw, target <= 1.10x; \
         spawn to reap inside agentd: median {im:.0} µs)",
        lm / rm
    );
    println!(
        "  under the default profile:     median {pm:.0} µs, p99 {pp:.0} µs ({:.2}x raw, target <= 1.15x; \
         spawn to reap inside agentd: median {pim:.0} µs)",
        pm / rm
    );
    println!(
        "  the same with network = \"deny\" (an exec's override): median {om:.0} µs, p99 {op:.0} µs ({:.2}x raw; \
         spawn to reap inside agentd: median {oim:.0} µs)",
        om / rm
    );
}

/// Round trips that each come after a quiet spell, as an agent's commands do (it thinks between them):
/// a cost that comes only after a pause (a kernel lock left alone for a moment waits out an RCU grace
/// period when next taken) shows here and not in back-to-back runs.
async fn after_quiet_spells(unconfined: &LocalSandbox, confined: &LocalSandbox) {
    let (mut over_link, mut profiled, mut raw) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..QUIET_ROUND_TRIPS {
        for kind in 0..3 {
            tokio::time::sleep(QUIET_SPELL).await;
            match (i + kind) % 3 {
                0 => over_link.push(exec_true(unconfined.agentd()).await),
                1 => profiled.push(exec_true(confined.agentd()).await),
                _ => raw.push(raw_spawn()),
            }
        }
    }
    let (lm, lp) = summary(&mut over_link);
    let (pm, pp) = summary(&mut profiled);
    let (rm, rp) = summary(&mut raw);
    println!(
        "round trip of `true` after {} ms of quiet each ({QUIET_ROUND_TRIPS} runs each, in turns):",
        QUIET_SPELL.as_millis()
    );
    println!("  raw spawn of /bin/sh -c true:  median {rm:.0} µs, p99 {rp:.0} µs");
    println!("  over the link, unconfined:     median {lm:.0} µs, p99 {lp:.0} µs ({:.2}x raw)", lm / rm);
    println!("  under the default profile:     median {pm:.0} µs, p99 {pp:.0} µs ({:.2}x raw)", pm / rm);
}

/// Execs per second with `in_flight` of them always running, spread over `links`.
async fn link_rate(links: &[AgentdSandbox], in_flight: usize, total: usize) -> f64 {
    let next = AtomicUsize::new(0);
    let start = Instant::now();
    let workers = (0..in_flight).map(|i| {
        let (link, next) = (&links[i % links.len()], &next);
        async move {
            while next.fetch_add(1, Ordering::Relaxed) < total {
                exec_true(link).await;
            }
        }
    });
    futures_util::future::join_all(workers).await;
    total as f64 / start.elapsed().as_secs_f64()
}

/// Spawns per second from `threads` threads, each spawning one `/bin/sh -c true` after another. The
/// clock starts once every thread is ready: making 256 threads is not the spawns' cost.
fn raw_rate(threads: usize, total: usize) -> f64 {
    let next = Arc::new(AtomicUsize::new(0));
    let ready = Arc::new(std::sync::Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (next, ready) = (Arc::clone(&next), Arc::clone(&ready));
            std::thread::spawn(move || {
                ready.wait();
                while next.fetch_add(1, Ordering::Relaxed) < total {
                    raw_spawn();
                }
            })
        })
        .collect();
    ready.wait();
    let start = Instant::now();
    for worker in workers {
        worker.join().unwrap();
    }
    total as f64 / start.elapsed().as_secs_f64()
}

async fn connect_links(sb: &LocalSandbox) -> Vec<AgentdSandbox> {
    let mut links = Vec::with_capacity(LINKS);
    for _ in 0..LINKS {
        links.push(sb.connect().await.unwrap());
    }
    links
}

async fn throughput(unconfined: &LocalSandbox, confined: &LocalSandbox) {
    let unconfined_links = connect_links(unconfined).await;
    let confined_links = connect_links(confined).await;
    println!(
        "throughput of `true`, execs/s and the ratio to raw spawns measured just before (target >= 0.85x); \
         medians of {THROUGHPUT_ROUNDS} rounds [lowest-highest ratio]:"
    );
    println!(
        "  {:>9} {:>6} | {:>22} {:>22} | {:>22} {:>22}",
        "in flight", "raw", "unconfined 1 link", "8 links", "default 1 link", "8 links"
    );
    let cells: [&[AgentdSandbox]; 4] =
        [&unconfined_links[..1], &unconfined_links, &confined_links[..1], &confined_links];
    for in_flight in IN_FLIGHT {
        let total = (in_flight * 8).max(500);
        let mut raw_rates = Vec::new();
        let mut rates = vec![Vec::new(); cells.len()];
        let mut ratios = vec![Vec::new(); cells.len()];
        for round in 0..THROUGHPUT_ROUNDS {
            // Each kind takes each place in the order in turn, as drift would favour one place.
            for turn in 0..cells.len() {
                let cell = (round + turn) % cells.len();
                let raw = tokio::task::spawn_blocking(move || raw_rate(in_flight, total)).await.unwrap();
                let rate = link_rate(cells[cell], in_flight, total).await;
                raw_rates.push(raw);
                rates[cell].push(rate);
                ratios[cell].push(rate / raw);
            }
        }
        let shown: Vec<String> = (0..cells.len())
            .map(|cell| {
                let ratio = &mut ratios[cell];
                ratio.sort_by(f64::total_cmp);
                format!(
                    "{:>5.0} {:.2}x [{:.2}-{:.2}]",
                    middle(&mut rates[cell]),
                    ratio[ratio.len() / 2],
                    ratio[0],
                    ratio[ratio.len() - 1]
                )
            })
            .collect();
        println!(
            "  {in_flight:>9} {:>6.0} | {:>22} {:>22} | {:>22} {:>22}",
            middle(&mut raw_rates),
            shown[0],
            shown[1],
            shown[2],
            shown[3]
        );
    }
}

/// The median of `values`.
fn middle(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// CPU time of agentd (its own threads, and its reaped children) per exec of `true`, with 64 in
/// flight over 8 links: where the throughput goes, confined against unconfined.
async fn cpu_per_exec(unconfined: &LocalSandbox, confined: &LocalSandbox) {
    const EXECS: usize = 4000;
    // utime, stime, cutime, cstime, in clock ticks.
    let times = |pid: u32| -> [u64; 4] {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<u64> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .skip(11)
            .take(4)
            .map(|f| f.parse().unwrap())
            .collect();
        [fields[0], fields[1], fields[2], fields[3]]
    };
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).unwrap().unwrap();
    let tick_us = 1e6 / ticks as f64;
    println!("CPU per exec of `true`, 64 in flight over 8 links, {EXECS} execs (µs):");
    let raw = tokio::task::spawn_blocking(move || {
        use nix::sys::resource::{UsageWho, getrusage};
        let micros = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 * 1e6 + t.tv_usec() as f64;
        let cpu = |who| getrusage(who).map(|u| [micros(u.user_time()), micros(u.system_time())]).unwrap();
        let (own, children, machine) =
            (cpu(UsageWho::RUSAGE_SELF), cpu(UsageWho::RUSAGE_CHILDREN), machine_ticks());
        let rate = raw_rate(64, EXECS);
        let (own2, children2, machine2) =
            (cpu(UsageWho::RUSAGE_SELF), cpu(UsageWho::RUSAGE_CHILDREN), machine_ticks());
        let per = |a: [f64; 2], b: [f64; 2]| ((b[0] - a[0]) / EXECS as f64, (b[1] - a[1]) / EXECS as f64);
        let idle = (machine2.0 - machine.0) as f64 / (machine2.1 - machine.1) as f64;
        (per(own, own2), per(children, children2), rate, idle)
    })
    .await
    .unwrap();
    let ((ou, os), (cu, cs), rate, idle) = raw;
    println!(
        "  {:>15}: spawning threads user {ou:.0} + system {os:.0}; their children user {cu:.0} + system {cs:.0} \
         ({rate:.0} execs/s; the machine idle {:.0}% of the time)",
        "raw spawns",
        idle * 100.0
    );
    for (name, sb) in [("unconfined", unconfined), ("default profile", confined)] {
        let links = connect_links(sb).await;
        let before = times(sb.pid());
        let machine_before = machine_ticks();
        let rate = link_rate(&links, 64, EXECS).await;
        let machine_after = machine_ticks();
        let after = times(sb.pid());
        let per = |i: usize| (after[i] - before[i]) as f64 * tick_us / EXECS as f64;
        let idle = (machine_after.0 - machine_before.0) as f64 / (machine_after.1 - machine_before.1) as f64;
        println!(
            "  {name:>15}: agentd user {:.0} + system {:.0}; its children user {:.0} + system {:.0} \
             ({rate:.0} execs/s; the machine idle {:.0}% of the time)",
            per(0),
            per(1),
            per(2),
            per(3),
            idle * 100.0
        );
    }
}

/// The machine's idle (with I/O wait) and total CPU ticks so far, from the `cpu` line of /proc/stat
/// (its first 8 fields: the guest ones after them are already counted in `user`).
fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let ticks: Vec<u64> =
        stat.lines().next().unwrap().split_whitespace().skip(1).take(8).map(|f| f.parse().unwrap()).collect();
    (ticks[3] + ticks[4], ticks.iter().sum())
}

/// A 1 GiB output kept in a 10 MiB offloaded capture.
fn capture_request(path: &str) -> ExecRequest {
    ExecRequest {
        command: format!("head -c {GIB} /dev/zero"),
        max_capture_bytes: Some(10 << 20),
        offload: Some(Offload { capture_path: path.to_owned(), inline_budget: 80_000 }),
        ..ExecRequest::default()
    }
}

async fn latency_beside_a_capture(sb: &LocalSandbox) {
    let links = connect_links(sb).await;
    let (small, big) = (&links[0], &links[1]);
    let mut idle: Vec<Duration> = Vec::with_capacity(LATENCY_SAMPLES);
    for _ in 0..LATENCY_SAMPLES {
        idle.push(exec_true(small).await);
    }
    let path = sb.workspace().join("beside.bin").to_string_lossy().into_owned();
    let mut busy = Vec::with_capacity(LATENCY_SAMPLES);
    let mut captures = 0;
    while busy.len() < LATENCY_SAMPLES {
        let capture = big.exec(capture_request(&path), None);
        tokio::pin!(capture);
        // Samples count only while the capture runs.
        loop {
            tokio::select! {
                r = &mut capture => {
                    assert_eq!(r.unwrap().total_bytes, GIB);
                    break;
                }
                took = exec_true(small) => busy.push(took),
            }
        }
        captures += 1;
    }
    let (im, ip) = summary(&mut idle);
    let (bm, bp) = summary(&mut busy);
    let (mut raw_idle, mut raw_busy) = tokio::task::spawn_blocking(raw_latency_beside_a_pipe).await.unwrap();
    let (rim, rip) = summary(&mut raw_idle);
    let (rbm, rbp) = summary(&mut raw_busy);
    println!("latency of `true` under the default profile, beside a 1 GiB capture on another link:");
    println!("  idle:               median {im:.0} µs, p99 {ip:.0} µs");
    println!(
        "  beside the capture: median {bm:.0} µs, p99 {bp:.0} µs ({} samples over {captures} captures; \
         p99 {:.2}x idle, target <= 2x)",
        busy.len(),
        bp / ip
    );
    println!(
        "  the machine's own: a raw spawn of /bin/sh -c true, idle and beside `head -c 1G /dev/zero | cat`:"
    );
    println!("    idle:             median {rim:.0} µs, p99 {rip:.0} µs");
    println!("    beside the pipe:  median {rbm:.0} µs, p99 {rbp:.0} µs (p99 {:.2}x idle)", rbp / rip);
}

/// Raw spawns, idle and while `head -c 1G /dev/zero | cat > /dev/null` runs beside them.
fn raw_latency_beside_a_pipe() -> (Vec<Duration>, Vec<Duration>) {
    let idle: Vec<Duration> = (0..LATENCY_SAMPLES).map(|_| raw_spawn()).collect();
    let mut busy = Vec::with_capacity(LATENCY_SAMPLES);
    while busy.len() < LATENCY_SAMPLES {
        let script = format!("head -c {GIB} /dev/zero | cat > /dev/null");
        let mut pipe = Command::new("/bin/sh").args(["-c", &script]).spawn().unwrap();
        while pipe.try_wait().unwrap().is_none() {
            busy.push(raw_spawn());
        }
    }
    (idle, busy)
}

/// Wall time of `sh -c script`.
fn shell_time(script: &str) -> Duration {
    let start = Instant::now();
    assert!(Command::new("/bin/sh").args(["-c", script]).status().unwrap().success());
    start.elapsed()
}

async fn capture(sb: &LocalSandbox) {
    let path = sb.workspace().join("capture.bin").to_string_lossy().into_owned();
    let me = std::env::current_exe().unwrap();
    let reader = |mode: &str| format!("head -c {GIB} /dev/zero | '{}' {SPLICE_READER} {mode}", me.display());
    let (blocking_script, floor_script) = (reader("blocking"), reader("spin"));
    let cat_script = format!("head -c {GIB} /dev/zero | cat > /dev/null");
    let mut times = Vec::new();
    let (mut cat, mut blocking, mut floor) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..CAPTURE_RUNS {
        let start = Instant::now();
        let r = sb.agentd().exec(capture_request(&path), None).await.unwrap();
        times.push(start.elapsed());
        assert_eq!((r.total_bytes, r.capped), (GIB, true));
        cat.push(shell_time(&cat_script));
        blocking.push(shell_time(&blocking_script));
        floor.push(shell_time(&floor_script));
    }
    let (c, d, b, f) = (median(times), median(cat), median(blocking), median(floor));
    println!("1 GiB of output ({CAPTURE_RUNS} runs each, interleaved):");
    println!("  `head -c 1G /dev/zero | cat > /dev/null`:                   median {:.0} ms", millis(d));
    println!("  `head -c 1G /dev/zero | splice to /dev/null`, blocking:     median {:.0} ms", millis(b));
    println!("  floor: the same splice, an empty pipe tried for 20 µs:      median {:.0} ms", millis(f));
    println!(
        "  agentd capture (10 MiB cap, offloaded):                     median {:.0} ms ({:.2}x the cat \
         pipe, target <= 0.8x; {:.2}x the floor{})",
        millis(c),
        c.as_secs_f64() / d.as_secs_f64(),
        c.as_secs_f64() / f.as_secs_f64(),
        if c.as_secs_f64() <= 1.1 * f.as_secs_f64() { ": within 1.1x of it or below" } else { "" }
    );
}

/// Upload and download of [`TRANSFER_BYTES`] over one link, in turns, next to hashing them here.
async fn transfer(sb: &LocalSandbox) {
    use sha2::Digest as _;
    use tokio::io::AsyncReadExt as _;
    let link = sb.agentd().link().await.unwrap();
    let path = sb.workspace().join("transfer.bin").to_string_lossy().into_owned();
    let (mut up, mut down, mut hash) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..TRANSFER_RUNS {
        let start = Instant::now();
        let failed = link.upload(&path, tokio::io::repeat(b'x').take(TRANSFER_BYTES), |_| {}).await.unwrap();
        up.push(start.elapsed());
        assert_eq!(failed, None);
        let start = Instant::now();
        let got = link.download(&path, tokio::io::sink(), |_, _| {}).await.unwrap().unwrap();
        down.push(start.elapsed());
        assert_eq!(got.size, TRANSFER_BYTES);
        let block = vec![b'x'; agentd_protocol::limits::CHUNK_SIZE];
        let start = Instant::now();
        let mut hasher = sha2::Sha256::new();
        for _ in 0..TRANSFER_BYTES / block.len() as u64 {
            hasher.update(&block);
        }
        std::hint::black_box(hasher.finalize());
        hash.push(start.elapsed());
    }
    let rate = |d: Duration| TRANSFER_BYTES as f64 / 1048576.0 / d.as_secs_f64();
    let (u, d, h) = (median(up), median(down), median(hash));
    println!("256 MiB over the link ({TRANSFER_RUNS} runs each, interleaved):");
    println!("  sha256 of the bytes here: median {:.0} ms ({:.0} MiB/s)", millis(h), rate(h));
    println!("  upload:                   median {:.0} ms ({:.0} MiB/s)", millis(u), rate(u));
    println!("  download:                 median {:.0} ms ({:.0} MiB/s)", millis(d), rate(d));
}

/// The floor's readers: move their stdin pipe to /dev/null inside the kernel until EOF, with the pipe
/// widened to 1 MiB as agentd widens a command's output pipe (fewer wakeups for the writer).
/// `blocking`: one blocking `splice` after another, asleep whenever the pipe is empty, so every write
/// that finds it so wakes the reader. `spin`: a pipe found empty is tried again for 20 µs before the
/// reader sleeps in `poll` (agentd's draining thread does the same), so a fast writer is seldom
/// woken for.
fn splice_stdin_to_null(mode: &str) {
    use nix::fcntl::{FcntlArg, SpliceFFlags, fcntl, splice};
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap();
    let stdin = std::io::stdin();
    fcntl(&stdin, FcntlArg::F_SETPIPE_SZ(1 << 20)).unwrap();
    let spin = match mode {
        "blocking" => None,
        "spin" => Some(Duration::from_micros(20)),
        other => panic!("no floor reader {other:?}"),
    };
    let flags = if spin.is_some() { SpliceFFlags::SPLICE_F_NONBLOCK } else { SpliceFFlags::empty() };
    let mut empty_since = None;
    loop {
        match splice(&stdin, None, &null, None, 1 << 20, flags) {
            Ok(0) => return,
            Ok(_) => empty_since = None,
            Err(nix::errno::Errno::EAGAIN) => {
                let since: Instant = *empty_since.get_or_insert_with(Instant::now);
                if spin.is_some_and(|spin| since.elapsed() >= spin) {
                    empty_since = None;
                    let mut fds = [nix::poll::PollFd::new(stdin.as_fd(), nix::poll::PollFlags::POLLIN)];
                    nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE).unwrap();
                }
            }
            Err(err) => panic!("splice: {err}"),
        }
    }
}
