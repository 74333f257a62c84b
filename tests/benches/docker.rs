//! Container benchmark: prints figures, asserts nothing. Needs the Docker engine and the images from
//! `images/build.sh`.
//!
//! ```text
//! images/build.sh && cargo build --release --workspace && cargo bench -p agentd-tests --bench docker
//! ```

#![expect(clippy::unwrap_used, reason = "a benchmark binary: a failed step aborts it with its message")]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentd_host::BaseSandbox;
use agentd_host::adapters::docker::DockerSandbox;
use agentd_tests::stats::{median, ms};

const IMAGE: &str = "agentd-busybox:latest";
const LINK_RUNS: usize = 500;
const DOCKER_EXEC_RUNS: usize = 50;
const CREATE_RUNS: usize = 7;

fn docker(args: &[&str]) -> Duration {
    let start = Instant::now();
    let status =
        Command::new("docker").args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().unwrap();
    assert!(status.success(), "docker {args:?}");
    start.elapsed()
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(run());
}

async fn run() {
    let sb = DockerSandbox::create(IMAGE).await.unwrap();
    for _ in 0..20 {
        sb.execute("true", None).await.unwrap();
    }
    let link: Vec<Duration> = {
        let mut times = Vec::with_capacity(LINK_RUNS);
        for _ in 0..LINK_RUNS {
            let start = Instant::now();
            sb.execute("true", None).await.unwrap();
            times.push(start.elapsed());
        }
        times
    };
    let exec: Vec<Duration> =
        (0..DOCKER_EXEC_RUNS).map(|_| docker(&["exec", sb.container(), "true"])).collect();
    let (link, exec) = (median(link), median(exec));
    println!("exec `true` over the link: median {:.3} ms ({LINK_RUNS} runs)", ms(link));
    println!("docker exec CONTAINER true: median {:.1} ms ({DOCKER_EXEC_RUNS} runs)", ms(exec));
    println!("link is {:.0}x faster (target >= 10x)", ms(exec) / ms(link));
    sb.close().await.unwrap();

    let mut ready = Vec::new();
    let mut plain = Vec::new();
    for _ in 0..CREATE_RUNS {
        let start = Instant::now();
        let sb = DockerSandbox::create(IMAGE).await.unwrap();
        ready.push(start.elapsed());
        sb.close().await.unwrap();
        plain.push(docker(&["run", "--rm", "--entrypoint", "/bin/true", IMAGE]));
    }
    let (ready, plain) = (median(ready), median(plain));
    println!("DockerSandbox create-to-ready: median {:.0} ms ({CREATE_RUNS} runs)", ms(ready));
    println!("docker run --rm IMAGE true: median {:.0} ms", ms(plain));
    println!("ratio {:.2}x (target <= 1.2x)", ms(ready) / ms(plain));
}
