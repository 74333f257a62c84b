//! Kubernetes benchmark: prints figures, asserts nothing about speed. Through the fake Kubernetes
//! API (`agentd_fakes::fake_kube`) on loopback, whose Pods are Docker containers:
//!
//! - **Ready**: a cold Pod (`kube:agentd-debian:latest`, agentd baked) against a claim from a warm
//!   pool of the same image (`kube-claim:POOL`, the template `agentctl sandbox kube-template` makes:
//!   agentd copied in by an initContainer), interleaved, each until the sandbox is linked.
//! - **Exec round trip**: one sandbox seen through two handles, one over the exec-stream link
//!   (`agentd bridge`) and one in `KubernetesMode::PodExec` (every call its own `pods/exec`, as
//!   `kubectl exec` does, the verbs derived through it).
//!
//! ```text
//! RUSTFLAGS="-C target-feature=+crt-static" cargo build --release -p agentd --target x86_64-unknown-linux-gnu
//! images/build.sh && cargo build --release --workspace && cargo bench -p agentd-tests --bench kubernetes
//! ```

#![expect(clippy::unwrap_used, reason = "a benchmark binary: a failed step aborts it with its message")]

use std::time::{Duration, Instant};

use agentd_fakes::fake_kube::FakeKube;
use agentd_host::BaseSandbox as _;
use agentd_host::adapters::kubernetes::{
    Channel, Cluster, KubernetesMode, KubernetesOptions, KubernetesSandbox, manifests,
};
use agentd_tests::stats::{ms, percentile};

const IMAGE: &str = "agentd-debian:latest";
const POOL: &str = "bench";
/// Sandboxes made each way for the readiness figures.
const READY_RUNS: usize = 5;
/// Calls through one-shot execs per figure.
const EXEC_RUNS: usize = 100;

fn main() {
    agentd_tests::channels::main(run());
}

async fn run() {
    if !agentd_tests::channels::can_compare(IMAGE, "kubernetes::main").await {
        return;
    }
    let fake = FakeKube::start();
    agentd_fakes::fake_kube::agent_sandbox::install(&fake);
    let options = |mode| KubernetesOptions {
        mode,
        kubeconfig: Some(fake.kubeconfig_path().to_owned()),
        link_timeout: Duration::from_secs(20),
        ..KubernetesOptions::default()
    };
    let cluster = Cluster::connect(&options(KubernetesMode::Link)).await.unwrap();
    let template = manifests::sandbox_template(POOL, IMAGE, manifests::AGENTD_IMAGE);
    manifests::apply(&cluster, &[template, manifests::warm_pool(POOL, POOL, 2)]).await.unwrap();

    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for _ in 0..READY_RUNS {
        let start = Instant::now();
        let pod = KubernetesSandbox::create(IMAGE, &options(KubernetesMode::Link)).await.unwrap();
        cold.push(start.elapsed());
        pod.close().await.unwrap();
        wait_pool_ready(&fake, 2).await;
        let start = Instant::now();
        let claimed = KubernetesSandbox::claim(POOL, &options(KubernetesMode::Link)).await.unwrap();
        warm.push(start.elapsed());
        claimed.close().await.unwrap();
    }
    cold.sort();
    warm.sort();
    let (cold, warm) = (percentile(&cold, 0.5), percentile(&warm, 0.5));
    println!(
        "ready and linked, median of {READY_RUNS}: cold Pod {:.0} ms, warm-pool claim {:.0} ms ({:.1}x faster)",
        ms(cold),
        ms(warm),
        cold.as_secs_f64() / warm.as_secs_f64()
    );

    let linked = KubernetesSandbox::create(IMAGE, &options(KubernetesMode::Link)).await.unwrap();
    let one_shot = KubernetesSandbox::attach(linked.id(), &options(KubernetesMode::PodExec)).await.unwrap();
    assert_eq!((linked.channel(), one_shot.channel()), (Channel::Link, Channel::PodExec));
    agentd_tests::channels::compare(&linked, &one_shot, "one-shot pod exec", EXEC_RUNS).await;
    drop(one_shot);
    linked.close().await.unwrap();
}

/// Waits until the warm pool reports `ready` ready Sandboxes.
async fn wait_pool_ready(fake: &FakeKube, ready: u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let url = format!(
        "{}/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default/sandboxwarmpools/{POOL}",
        fake.url()
    );
    let client = reqwest::Client::new();
    loop {
        let pool: serde_json::Value =
            client.get(&url).bearer_auth(fake.token()).send().await.unwrap().json().await.unwrap();
        if pool["status"]["readyReplicas"].as_u64().unwrap_or(0) >= ready {
            return;
        }
        assert!(Instant::now() < deadline, "the warm pool never got {ready} ready: {pool}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
