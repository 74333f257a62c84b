//! Latency under a kill storm: 40 execs time out at once with about 1500 processes around, and
//! another connection's `exec true` must still come back; every process of the timed-out execs is
//! gone afterwards, a double-forked `setsid` process with an emptied environment included.
//!
//! Everything runs inside a pids cgroup the test makes ([`PidsCap`]); without a writable cgroup v1
//! `pids` hierarchy the test skips (`AGENTD_REQUIRE_CGROUP`).

// Test helpers outside #[test] functions: a failed step aborts the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agentd_host::Link;
use agentd_host::adapters::local::{
    DEFAULT_PROCESSES, DefaultProfile, Lifetime, TokenSource, socket_dir, spawn_agentd,
};
use agentd_protocol::ExecRequest;
use agentd_tests::stats::{median, ms};
use agentd_tests::{Need, PidsCap, skip};

/// Execs that time out together, and the sleepers each one starts.
const EXECS: usize = 40;
const SLEEPERS: usize = 35;

/// Each exec: first a process that leaves the tree twice over (a subshell that exits, so it is
/// re-parented to agentd) and clears its environment (so it has no exec tag): only the command's
/// pids cgroup still knows it; then the sleepers. SIGTERM is ignored by all of them (an ignored
/// signal stays ignored across exec), so the whole ladder runs: grace, then SIGKILL.
fn storm_command() -> String {
    format!(
        "trap '' TERM; (setsid env -i sleep 1021 >/dev/null 2>&1 &); \
         for i in $(seq {SLEEPERS}); do sleep 1021 & done; wait"
    )
}

/// Ends the agentd it holds (SIGTERM, then SIGKILL after 10 s), even when the test fails.
struct Stop(Child);

impl Drop for Stop {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if !matches!(self.0.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_stays_responsive_while_forty_timeouts_kill_1500_processes() {
    // Room for the 1500 processes, agentd's threads, and the per-command limit the profile sets.
    let Some(cap) = PidsCap::or_skip(DEFAULT_PROCESSES as u32 + 200) else { return };
    let workspace = tempfile::tempdir().unwrap();
    let profile = DefaultProfile::create(workspace.path()).unwrap();
    let sockets = socket_dir().unwrap();
    let (child, started) = {
        let _inside = cap.join_thread();
        spawn_agentd(
            workspace.path(),
            sockets.path(),
            Lifetime::TiedToParent,
            Some(&profile.file()),
            TokenSource::Env("latency-token"),
        )
        .unwrap()
    };
    let agentd = Stop(child);
    let storm_link = Link::connect(&started.url, Some("latency-token")).await.unwrap();
    let probe = Link::connect(&started.url, Some("latency-token")).await.unwrap();

    let storm_over = AtomicBool::new(false);
    let storm = async {
        let execs = (0..EXECS).map(|_| {
            let request =
                ExecRequest { command: storm_command(), timeout: Some(1.0), ..ExecRequest::default() };
            storm_link.exec(request, None)
        });
        let results = futures_util::future::join_all(execs).await;
        storm_over.store(true, Ordering::Release);
        results
    };
    // Round trips on the second connection, back to back, for as long as the storm lasts.
    let probes = async {
        let mut latencies = Vec::new();
        while !storm_over.load(Ordering::Acquire) {
            let request = ExecRequest { command: "true".to_owned(), ..ExecRequest::default() };
            let sent = Instant::now();
            let r = probe.exec(request, None).await.unwrap();
            latencies.push(sent.elapsed());
            assert_eq!(r.exit_code, 0, "{r:?}");
        }
        latencies
    };
    let started_at = Instant::now();
    let (results, latencies) = tokio::join!(storm, probes);
    let storm_took = started_at.elapsed();
    let slowest = latencies.iter().max().copied().unwrap_or_default();
    let count = latencies.len();
    eprintln!(
        "{EXECS} timeouts over {} processes took {storm_took:?}; `exec true` on another connection: \
         {count} round trips, max {:.1} ms, median {:.1} ms",
        EXECS * (SLEEPERS + 2),
        ms(slowest),
        ms(median(latencies)),
    );
    for r in &results {
        let r = r.as_ref().unwrap();
        assert!(r.ending.timed_out, "{r:?}");
    }

    // Nothing of the timed-out execs is left: the cap holds agentd and nothing else (a thread of
    // this test may have been counted in it while agentd started; it is no command).
    let own = [started.pid as i32, std::process::id() as i32];
    let left: Vec<i32> = cap.pids().into_iter().filter(|pid| !own.contains(pid)).collect();
    let made_cgroups = cap.dir.join(format!("agentd-{}", started.pid)).is_dir();
    if made_cgroups {
        assert!(left.is_empty(), "{} processes outlived their exec's timeout: {left:?}", left.len());
    } else {
        // Without a per-command cgroup nothing knows the env-cleared escapee (one per exec).
        let tagged: Vec<i32> = left.iter().copied().filter(|pid| has_environment(*pid)).collect();
        assert!(tagged.is_empty(), "{} processes outlived their exec's timeout: {tagged:?}", tagged.len());
        skip(Need::Cgroup, "agentd made no per-command pids cgroup: the escapee check needs one");
    }

    // A liveness bound, not a speed target: with the kill ladder on the runtime thread this was
    // measured at 11.9 s; off it, the round trip waits only for CPU, which 1500 dying processes on
    // two cores share with it (under a second here, alone). 5 s tells the two apart on a loaded
    // machine.
    assert!(slowest < Duration::from_secs(5), "an `exec true` took {slowest:?} during the storm");
    assert!(count >= 2, "too few round trips to tell: {count}");
    drop(agentd);
}

/// Whether `pid` has an environment (`false` also when it is gone).
fn has_environment(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| !env.is_empty())
}
