//! `KubernetesSandbox` against the fake Kubernetes API (`agentd_fakes::fake_kube`): real Pods (Docker
//! containers from the `agentd-*` images), the `pods/exec` websocket carrying `agentd bridge`, and
//! agent-sandbox claims from warm pools.
//!
//! Without Docker or the images each test prints one `skipped:` line and returns
//! ([`agentd_tests::skip`]), unless `AGENTD_REQUIRE_DOCKER=1` makes that a failure.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::time::{Duration, Instant};

use agentd_fakes::fake_kube::FakeKube;
use agentd_host::AgentdSource;
use agentd_host::adapters::kubernetes::{
    Backing, Channel, KubernetesMode, KubernetesOptions, KubernetesProvider, KubernetesSandbox,
};
use agentd_host::provider::Provider as _;
use agentd_host::{BaseSandbox, SandboxError};

const DEBIAN: &str = "agentd-debian:latest";
const DEBIAN_BASE: &str = "agentd-base-debian:latest";

fn options(fake: &FakeKube, mode: KubernetesMode) -> KubernetesOptions {
    KubernetesOptions {
        mode,
        kubeconfig: Some(fake.kubeconfig_path().to_owned()),
        link_timeout: Duration::from_secs(20),
        start_timeout: Duration::from_secs(60),
        agentd_binary: None,
        ..KubernetesOptions::default()
    }
}

/// A fake and a Pod sandbox on it from `image`, or `None` (skipped).
async fn sandbox(image: &str, mode: KubernetesMode) -> Option<(FakeKube, KubernetesSandbox)> {
    if !agentd_tests::docker_available(image).await {
        return None;
    }
    let fake = FakeKube::start();
    let mut options = options(&fake, mode);
    if image == DEBIAN_BASE {
        options.agentd_binary = Some(agentd_tests::static_agentd());
    }
    let started = Instant::now();
    let sb = KubernetesSandbox::create(image, &options).await.unwrap();
    eprintln!("kube:{image} ({mode:?}): ready and linked in {:?}", started.elapsed());
    Some((fake, sb))
}

/// The sandboxes agentd made in the fake's namespace (ids).
async fn pods(fake: &FakeKube) -> Vec<String> {
    let provider = KubernetesProvider::new(options(fake, KubernetesMode::Auto));
    provider.list().await.unwrap().into_iter().map(|info| info.id).collect()
}

/// Whether every sandbox agentd made is gone within 30 s (a deleted Pod is `Terminating` for a
/// while, as on a real cluster).
async fn all_gone(fake: &FakeKube) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = pods(fake).await;
        if left.is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            eprintln!("still listed: {left:?}");
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_baked_pod_over_the_exec_stream() {
    let Some((fake, sb)) = sandbox(DEBIAN, KubernetesMode::Link).await else { return };
    assert_eq!(sb.channel(), Channel::Link);
    assert_eq!(sb.agentd_source(), Some(AgentdSource::Baked));
    assert_eq!(sb.backing(), &Backing::Pod);
    assert_eq!(sb.id(), format!("default/{}", sb.pod()));
    agentd_tests::check_commands_and_verbs(&sb).await;
    agentd_tests::check_transfers(&sb, "the link").await;
    // Every call went over one exec stream (the bridge), besides the setup's probe.
    let execs = fake.requests().iter().filter(|r| r.contains("/exec")).count();
    assert!(execs <= 3, "{:?}", fake.requests());
    let listed = pods(&fake).await;
    assert!(listed.contains(&sb.id().to_owned()), "{listed:?}");
    sb.close().await.unwrap();
    assert!(all_gone(&fake).await);
}

#[tokio::test]
async fn agentd_is_injected_into_an_image_without_it() {
    let Some((_fake, sb)) = sandbox(DEBIAN_BASE, KubernetesMode::Link).await else { return };
    assert_eq!(sb.agentd_source(), Some(AgentdSource::Injected));
    assert_eq!(sb.agentd_command(), "/tmp/.agentd/agentd");
    let out = sb.execute("echo in-kube; uname -s", None).await.unwrap();
    assert_eq!((out.output.as_str(), out.exit_code), ("in-kube\nLinux\n", Some(0)));
    sb.close().await.unwrap();
}

/// Without a link (`PodExec`): `execute` and transfers run as plain execs, the verbs derived.
#[tokio::test]
async fn plain_execs_without_a_link() {
    let Some((_fake, sb)) = sandbox(DEBIAN, KubernetesMode::PodExec).await else { return };
    assert_eq!(sb.channel(), Channel::PodExec);
    agentd_tests::check_commands_and_verbs(&sb).await;
    agentd_tests::check_transfers(&sb, "pod exec").await;
    let out = sb.execute("exit 7", None).await.unwrap();
    assert_eq!(out.exit_code, Some(7));
    sb.close().await.unwrap();
}

/// The API server drops every exec stream mid-command: agentd and the command run on in the Pod,
/// the link heals through a new exec, and the caller gets the whole output and the true exit code.
#[tokio::test]
async fn a_dropped_exec_stream_loses_nothing() {
    let Some((fake, sb)) = sandbox(DEBIAN, KubernetesMode::Link).await else { return };
    let sb = std::sync::Arc::new(sb);
    let running = {
        let sb = std::sync::Arc::clone(&sb);
        tokio::spawn(async move {
            sb.execute("for i in 1 2 3 4 5 6; do echo line $i; sleep 0.3; done; exit 3", None).await
        })
    };
    let mut dropped = 0;
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(350)).await;
        dropped += fake.drop_exec_streams();
    }
    let out = running.await.unwrap().unwrap();
    assert!(dropped >= 2, "only {dropped} streams were dropped");
    let expected: String = (1..=6).map(|i| format!("line {i}\n")).collect();
    assert_eq!((out.output.as_str(), out.exit_code), (expected.as_str(), Some(3)));
    eprintln!("{dropped} exec streams dropped during one execute");
    let again = sb.execute("echo after", None).await.unwrap();
    assert_eq!(again.output, "after\n");
}

/// An image that is not there fails at once with the kubelet's reason, and leaves no Pod.
#[tokio::test]
async fn a_missing_image_says_the_kubelets_reason() {
    if !agentd_tests::docker_available(DEBIAN).await {
        return;
    }
    let fake = FakeKube::start();
    let started = Instant::now();
    let err = KubernetesSandbox::create("agentd-no-such-image:1", &options(&fake, KubernetesMode::Auto))
        .await
        .err()
        .expect("a Pod of a missing image");
    let text = err.to_string();
    assert!(text.contains("cannot start: container sandbox: ErrImage"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    assert!(all_gone(&fake).await);
}

/// A Pod no node can take fails at the deadline with the scheduler's reason, and leaves no Pod.
#[tokio::test]
async fn an_unschedulable_pod_says_the_schedulers_reason() {
    if !agentd_tests::docker_available(DEBIAN).await {
        return;
    }
    let fake = FakeKube::start();
    let mut options = options(&fake, KubernetesMode::Auto);
    options.start_timeout = Duration::from_secs(2);
    options.pod_template = Some(
        serde_json::from_value(serde_json::json!({ "spec": { "nodeSelector": { "gpu": "h100" } } })).unwrap(),
    );
    let err = KubernetesSandbox::create(DEBIAN, &options).await.err().expect("an unschedulable Pod");
    let text = err.to_string();
    assert!(matches!(err, SandboxError::Timeout { .. }), "{text}");
    assert!(text.contains("Unschedulable") && text.contains("0/1 nodes are available"), "{text}");
    assert!(all_gone(&fake).await);
}

/// `kube-attach:NAMESPACE/NAME` reaches a Pod another host made; `remove` deletes it; a plain Pod
/// cannot be paused, and says so.
#[tokio::test]
async fn attach_remove_and_pause_through_the_provider() {
    let Some((fake, sb)) = sandbox(DEBIAN, KubernetesMode::Link).await else { return };
    sb.execute("echo kept > /tmp/mark", None).await.unwrap();
    let provider = KubernetesProvider::new(options(&fake, KubernetesMode::Link));
    let other = provider.attach(sb.id()).await.unwrap();
    assert_eq!(other.execute("cat /tmp/mark", None).await.unwrap().output, "kept\n");
    let paused = provider.pause(sb.id()).await.expect_err("a plain Pod paused").to_string();
    assert!(paused.contains("only claimed sandboxes"), "{paused}");
    for bad in ["../x", "Default/x", "a/b/c"] {
        let err = provider.attach(bad).await.err().expect("a bad id").to_string();
        assert!(err.contains("not a well-formed sandbox id"), "{bad}: {err}");
    }
    drop(other);
    provider.remove(sb.id()).await.unwrap();
    assert!(all_gone(&fake).await);
}

/// The template `agentctl sandbox kube-template` makes (agentd copied in by an initContainer) and a
/// warm pool of it, applied through the API; waits until the pool has `ready` ready Sandboxes.
async fn warm_pool(fake: &FakeKube, name: &str, image: &str, ready: u64) {
    use agentd_host::adapters::kubernetes::{Cluster, manifests};
    agentd_fakes::fake_kube::agent_sandbox::install(fake);
    let cluster = Cluster::connect(&options(fake, KubernetesMode::Link)).await.unwrap();
    let template = manifests::sandbox_template(name, image, manifests::AGENTD_IMAGE);
    let pool = manifests::warm_pool(name, name, u32::try_from(ready).unwrap());
    manifests::apply(&cluster, &[template, pool]).await.unwrap();
    let url = format!(
        "{}/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default/sandboxwarmpools/{name}",
        fake.url()
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let pool: serde_json::Value = reqwest::Client::new()
            .get(&url)
            .bearer_auth(fake.token())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if pool["status"]["readyReplicas"].as_u64().unwrap_or(0) >= ready {
            return;
        }
        assert!(Instant::now() < deadline, "the warm pool never got {ready} ready: {pool}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A claim from a warm pool gets a ready Sandbox whose agentd came from the initContainer; it can
/// be suspended and resumed; closing it deletes the claim, its Sandbox and its Pod.
#[tokio::test]
async fn a_claim_from_a_warm_pool() {
    if !agentd_tests::docker_available(DEBIAN_BASE).await
        || !agentd_tests::docker_available("agentd-busybox:latest").await
    {
        return;
    }
    let fake = FakeKube::start();
    warm_pool(&fake, "py", DEBIAN_BASE, 1).await;
    let started = Instant::now();
    let sb = KubernetesSandbox::claim("py", &options(&fake, KubernetesMode::Link)).await.unwrap();
    eprintln!("kube-claim:py: ready and linked in {:?}", started.elapsed());
    assert_eq!(sb.channel(), Channel::Link);
    assert_eq!(sb.agentd_source(), Some(AgentdSource::Baked));
    assert_eq!(sb.agentd_command(), "/opt/agentd/bin/agentd");
    let Backing::Claim { claim } = sb.backing().clone() else { panic!("not a claim: {:?}", sb.backing()) };
    assert_eq!(sb.id(), format!("default/{claim}"));
    agentd_tests::check_commands_and_verbs(&sb).await;
    let listed = pods(&fake).await;
    assert!(listed.contains(&sb.id().to_owned()), "{listed:?}");

    let provider = KubernetesProvider::new(options(&fake, KubernetesMode::Link));
    provider.pause(sb.id()).await.unwrap();
    let pod = sb.pod().to_owned();
    assert!(
        fake.container_of("default", &pod, "sandbox").is_none(),
        "the suspended Sandbox's Pod still runs"
    );
    provider.resume(sb.id()).await.unwrap();
    // The Pod is new (its files are gone); the link reconnects and starts agentd again.
    let out = sb.execute("echo resumed", None).await.unwrap();
    assert_eq!((out.output.as_str(), out.exit_code), ("resumed\n", Some(0)));

    sb.close().await.unwrap();
    assert!(all_gone(&fake).await);
    let deadline = Instant::now() + Duration::from_secs(30);
    while fake.container_of("default", &pod, "sandbox").is_some() {
        assert!(Instant::now() < deadline, "the claim's container outlived it");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A claim on a pool that does not exist fails with agent-sandbox's reason, and is deleted.
#[tokio::test]
async fn a_claim_on_a_missing_pool_says_why() {
    if !agentd_tests::docker_available(DEBIAN).await {
        return;
    }
    let fake = FakeKube::start();
    agentd_fakes::fake_kube::agent_sandbox::install(&fake);
    let err = KubernetesSandbox::claim("nowhere", &options(&fake, KubernetesMode::Link))
        .await
        .err()
        .expect("a claim on a missing pool")
        .to_string();
    assert!(err.contains("WarmPoolNotFound"), "{err}");
    assert!(all_gone(&fake).await);
}

/// `agentctl --sandbox kube:IMAGE exec` against the fake: the Pod is made, the command runs in it,
/// and the Pod is deleted when agentctl ends; `sandbox kube-template --apply` makes a warm pool that
/// `kube-claim:` then claims from.
#[tokio::test]
async fn agentctl_runs_in_kube() {
    if !agentd_tests::docker_available(DEBIAN).await {
        return;
    }
    let fake = FakeKube::start();
    agentd_fakes::fake_kube::agent_sandbox::install(&fake);
    let agentctl = |args: &[&str]| {
        let out = std::process::Command::new(agentd_tests::binary("agentctl"))
            .args(args)
            .env("KUBECONFIG", fake.kubeconfig_path())
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let (code, stdout, stderr) =
        agentctl(&["--sandbox", "kube:agentd-debian:latest", "exec", "--", "echo in-kube"]);
    assert_eq!((code, stdout.as_str()), (Some(0), "in-kube\n"), "{stderr}");
    assert!(all_gone(&fake).await);
    let (code, stdout, stderr) = agentctl(&[
        "sandbox",
        "kube-template",
        "--image",
        DEBIAN_BASE,
        "--name",
        "cli",
        "--replicas",
        "1",
        "--apply",
    ]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let (code, stdout, stderr) = agentctl(&[
        "--sandbox",
        "kube-claim:cli",
        "exec",
        "--",
        "echo claimed; command -v agentd || echo /opt",
    ]);
    assert_eq!((code, stdout.as_str()), (Some(0), "claimed\n/opt\n"), "{stderr}");
}
