//! What the provider benchmarks share (`benches/daytona.rs`, `benches/modal.rs`): one sandbox seen
//! through two handles in the same run, one over the websocket link and one through the provider's
//! own exec channel (the verbs derived through it), timed interleaved so drift hits both alike.
//! Prints figures; asserts only that both give the same results.

use std::future::Future;
use std::time::{Duration, Instant};

use agentd_host::BaseSandbox;

use crate::stats::{ms, percentile};

const FILE: &str = "/tmp/bench/2000.txt";
/// Calls over the link per call through the exec channel.
const LINK_PER_EXEC: usize = 5;

/// Runs a benchmark's body on a current-thread runtime.
pub fn main<F: Future<Output = ()>>(body: F) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(body);
}

/// Whether a comparison can run here: Docker with `image`, and the static agentd to inject
/// (without it no link can be made, so there is nothing to compare). Otherwise one `skipped:` line.
pub async fn can_compare(image: &str, bench: &str) -> bool {
    if !crate::docker_available(image).await {
        return false;
    }
    match agentd_host::adapters::inject::static_agentd() {
        Ok(path) if path.is_file() => true,
        Ok(path) => {
            eprintln!("skipped: {bench}: no static agentd at {}", path.display());
            false
        }
        Err(err) => {
            eprintln!("skipped: {bench}: {err}");
            false
        }
    }
}

/// Median and p99 of a set of times.
pub struct Figure {
    pub median: Duration,
    pub p99: Duration,
    pub runs: usize,
}

impl Figure {
    fn of(mut times: Vec<Duration>) -> Self {
        times.sort();
        Self { median: percentile(&times, 0.5), p99: percentile(&times, 0.99), runs: times.len() }
    }

    fn line(&self) -> String {
        format!("median {:.3} ms, p99 {:.3} ms ({} runs)", ms(self.median), ms(self.p99), self.runs)
    }
}

/// Times `link` and `exec` interleaved: `LINK_PER_EXEC` link calls per exec-channel call.
async fn measure<L, LF, E, EF>(runs: usize, link: L, exec: E) -> (Figure, Figure)
where
    L: Fn() -> LF,
    LF: Future<Output = ()>,
    E: Fn() -> EF,
    EF: Future<Output = ()>,
{
    let mut link_times = Vec::with_capacity(runs * LINK_PER_EXEC);
    let mut exec_times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        exec().await;
        exec_times.push(start.elapsed());
        for _ in 0..LINK_PER_EXEC {
            let start = Instant::now();
            link().await;
            link_times.push(start.elapsed());
        }
    }
    (Figure::of(link_times), Figure::of(exec_times))
}

fn ratios(what: &str, link: &Figure, exec: &Figure, target: &str) {
    println!(
        "{what}: link is {:.1}x faster at the median, {:.1}x at p99{target}",
        ms(exec.median) / ms(link.median),
        ms(exec.p99) / ms(link.p99)
    );
}

/// `read` of 2000 lines (native over the link vs derived through `channel`) and `execute("true")`
/// both ways, `runs` calls through the exec channel per figure.
pub async fn compare(linked: &dyn BaseSandbox, exec: &dyn BaseSandbox, channel: &str, runs: usize) {
    let lines: String =
        (1..=2000).map(|i| format!("line {i} of the file, with some text after it\n")).collect();
    let up = linked.upload_files(&[(FILE.into(), lines.into_bytes())]).await.expect("upload");
    assert_eq!(up[0].error, None);
    // Both paths give the same result (the conformance suite checks this case by case).
    let native = linked.read(FILE, 0, 2000).await.expect("read over the link");
    assert_eq!(native, exec.read(FILE, 0, 2000).await.expect("read through the exec channel"));
    assert_eq!(native.end_line, Some(2000));
    for _ in 0..20 {
        linked.execute("true", None).await.expect("warm-up");
        linked.read(FILE, 0, 2000).await.expect("warm-up");
    }
    for _ in 0..3 {
        exec.execute("true", None).await.expect("warm-up");
    }
    let (exec_link, exec_channel) = measure(
        runs,
        || async { assert_eq!(linked.execute("true", None).await.expect("execute").exit_code, Some(0)) },
        || async { assert_eq!(exec.execute("true", None).await.expect("execute").exit_code, Some(0)) },
    )
    .await;
    let (read_link, read_channel) = measure(
        runs,
        || async { assert_eq!(linked.read(FILE, 0, 2000).await.expect("read").end_line, Some(2000)) },
        || async { assert_eq!(exec.read(FILE, 0, 2000).await.expect("read").end_line, Some(2000)) },
    )
    .await;
    println!("read of 2000 lines, native over the link: {}", read_link.line());
    println!("read of 2000 lines, derived through the {channel}: {}", read_channel.line());
    ratios("read", &read_link, &read_channel, " (target >= 10x)");
    println!("execute(\"true\") over the link: {}", exec_link.line());
    println!("execute(\"true\") through the {channel}: {}", exec_channel.line());
    ratios("execute", &exec_link, &exec_channel, "");
}
