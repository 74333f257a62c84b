//! Soak: many execs and uploads at several concurrencies, then everything agentd holds must be back
//! where it was: processes, file descriptors, threads, temporary files, and memory (RSS growth under
//! 1 MiB after a warm-up). Bounded in time: the whole test takes well under a minute here.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentd_host::{AgentdSandbox, BaseSandbox as _};
use agentd_tests::{Daemon, descendants, eventually, status_kb};

const EXECS: usize = 10_000;
const UPLOADS: usize = 1_000;
const CONCURRENCY: [usize; 3] = [1, 8, 32];
/// What one upload carries: several chunks' worth would only test the disk.
const UPLOAD_BYTES: usize = 64 * 1024;

/// What agentd holds at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Holdings {
    processes: usize,
    fds: usize,
    threads: u64,
    temp_files: usize,
}

fn holdings(pid: u32, dirs: &[&Path]) -> Holdings {
    Holdings {
        processes: descendants(pid).len(),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count(),
        threads: status_count(pid, "Threads"),
        temp_files: dirs.iter().map(|d| temp_files(d)).sum(),
    }
}

fn status_count(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':')?.trim().parse().ok()).unwrap()
}

/// Upload temporaries (`.part`) and capture files left below `dir`.
fn temp_files(dir: &Path) -> usize {
    let mut count = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            } else if name.ends_with(".part") || name.starts_with("capture-") {
                count += 1;
            }
        }
    }
    count
}

/// What each descriptor of `pid` is, for a failure's message.
fn open_fds(pid: u32) -> Vec<String> {
    let mut fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| {
            format!(
                "{}: {}",
                e.file_name().to_string_lossy(),
                std::fs::read_link(e.path()).unwrap_or_default().display()
            )
        })
        .collect();
    fds.sort();
    fds
}

/// Runs `execs` execs and `uploads` uploads with `concurrency` requests in flight on one link.
async fn load(
    sb: &Arc<AgentdSandbox>,
    base: &Path,
    execs: usize,
    uploads: usize,
    concurrency: usize,
    round: usize,
) {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers = (0..concurrency).map(|_| {
        let (sb, next, base) = (Arc::clone(sb), Arc::clone(&next), base.to_path_buf());
        tokio::spawn(async move {
            let payload = vec![b'u'; UPLOAD_BYTES];
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= execs + uploads {
                    break;
                }
                if i < execs {
                    let r = sb.execute(&format!("echo {i}"), None).await.unwrap();
                    assert_eq!((r.output, r.exit_code), (format!("{i}\n"), Some(0)));
                } else {
                    // A fixed set of names: files are replaced, the workspace does not grow.
                    let path = format!("{}/up/{round}-{}.bin", base.display(), i % 64);
                    let up = sb.upload_files(&[(path, payload.clone())]).await.unwrap();
                    assert_eq!(up[0].error, None);
                }
            }
        })
    });
    for worker in futures_util::future::join_all(workers).await {
        worker.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_execs_and_a_thousand_uploads_leave_nothing_behind() {
    let daemon = Daemon::start();
    let pid = daemon.pid();
    let sb = Arc::new(AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap());
    let scratch = agentd_tests::scratch_dir(pid).expect("agentd's scratch directory");
    let dirs = [daemon.workspace.path(), scratch.as_path()];

    // Warm-up: the allocator's arenas, the blocking pool and the runtime reach their working size.
    load(&sb, daemon.workspace.path(), 500, 100, 32, 0).await;
    let settled = |expected: &Holdings| {
        let expected = expected.clone();
        move || {
            let now = holdings(pid, &dirs);
            now.processes == expected.processes
                && now.fds <= expected.fds
                && now.threads <= expected.threads
                && now.temp_files == expected.temp_files
        }
    };
    // Blocking-pool threads idle out after 10 s; wait for the quiet state before measuring.
    let quiet = Holdings { processes: 0, fds: usize::MAX, threads: u64::MAX, temp_files: 0 };
    assert!(eventually(Duration::from_secs(20), settled(&quiet)).await, "{:?}", holdings(pid, &dirs));
    tokio::time::sleep(Duration::from_secs(11)).await;
    let baseline = holdings(pid, &dirs);
    let baseline_fds = open_fds(pid);
    let rss_before = status_kb(pid, "VmRSS");

    let started = Instant::now();
    for (round, concurrency) in CONCURRENCY.into_iter().enumerate() {
        let t = Instant::now();
        load(&sb, daemon.workspace.path(), EXECS, UPLOADS, concurrency, round + 1).await;
        println!(
            "concurrency {concurrency}: {EXECS} execs + {UPLOADS} uploads in {:.1} s, RSS {} kB, {:?}",
            t.elapsed().as_secs_f64(),
            status_kb(pid, "VmRSS"),
            holdings(pid, &dirs)
        );
    }
    println!("soak: {:.1} s", started.elapsed().as_secs_f64());

    // Everything back: no process, no extra fd or thread (after the pool's idle timeout), no temp file.
    let back = eventually(Duration::from_secs(20), settled(&baseline)).await;
    assert!(
        back,
        "baseline {baseline:?} ({baseline_fds:?}), now {:?} ({:?})",
        holdings(pid, &dirs),
        open_fds(pid)
    );
    let rss_after = status_kb(pid, "VmRSS");
    println!("RSS after warm-up {rss_before} kB, after the soak {rss_after} kB");
    assert!(
        rss_after < rss_before + 1024,
        "RSS grew by {} kB over the soak (limit 1024 kB)",
        rss_after.saturating_sub(rss_before)
    );
}
